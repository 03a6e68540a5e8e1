package zookeeper_test

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// proxy is a TCP proxy in front of one ZooKeeper server, for cutting a
// client's connection without the client closing its session.
type proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	blocked bool
	// dropAfter, when set, is asked about every request frame the client
	// sends (by opcode); when it returns true, the frame is forwarded and
	// then the connection is cut before the answer can come back.
	dropAfter func(op int32) bool
	wg        sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		cut := func() {
			c.Close()
			s.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, s)
			p.mu.Unlock()
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer cut()
			p.forwardRequests(s, c, cut)
		}()
		go func() {
			defer p.wg.Done()
			defer cut()
			io.Copy(c, s)
		}()
	}
}

// forwardRequests copies client frames to the server, one frame at a time.
func (p *proxy) forwardRequests(dst, src net.Conn, cut func()) {
	first := true
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if _, err := dst.Write(append(hdr[:], body...)); err != nil {
			return
		}
		if !first && len(body) >= 8 {
			op := int32(binary.BigEndian.Uint32(body[4:]))
			p.mu.Lock()
			drop := p.dropAfter != nil && p.dropAfter(op)
			p.mu.Unlock()
			if drop {
				cut()
				return
			}
		}
		first = false
	}
}

// Block cuts every connection and refuses new ones until Unblock.
func (p *proxy) Block() {
	p.mu.Lock()
	p.blocked = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Unblock lets clients connect again.
func (p *proxy) Unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

// DropAfter sets the dropAfter hook.
func (p *proxy) DropAfter(f func(op int32) bool) {
	p.mu.Lock()
	p.dropAfter = f
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.Block()
	p.wg.Wait()
}

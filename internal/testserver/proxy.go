package testserver

import (
	"net"
	"sync"
)

// Proxy is a TCP proxy in front of one server, for tests of a link that
// goes silent: it forwards both ways until [Proxy.Swallow], after which the
// server's replies are read and dropped (on open connections and new ones)
// while the client's requests still reach the server. [Proxy.Heal] cuts
// every connection (their streams have lost bytes) and forwards again;
// [Proxy.Freeze] drops both ways. It
// is closed at the test's clean-up.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	swallow bool
	frozen  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
func NewProxy(t T, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Swallow makes the proxy drop every reply from now on.
func (p *Proxy) Swallow() {
	p.mu.Lock()
	p.swallow = true
	p.mu.Unlock()
}

// Heal cuts every connection and forwards replies again on new ones.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.swallow, p.frozen = false, false
	p.mu.Unlock()
	p.cutAll()
}

// Freeze makes the proxy drop every byte both ways from now on and keep
// the server's side of each connection open even when the client closes
// its side: to the server, the client looks frozen (SIGSTOP) or cut off by
// a partition; a connection ends when the server closes it.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.swallow, p.frozen = true, true
	p.mu.Unlock()
}

func (p *Proxy) swallowing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swallow
}

func (p *Proxy) freezing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

func (p *Proxy) cutAll() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
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
			forward(s, c, p.freezing) // requests, dropped while frozen
			if p.freezing() {
				c.Close() // the server's side stays until the server ends it
				return
			}
			cut()
		}()
		go func() {
			defer p.wg.Done()
			defer cut()
			forward(c, s, p.swallowing) // replies, dropped while swallowing
		}()
	}
}

// forward copies src's bytes to dst, dropping them while drop says so.
func forward(dst, src net.Conn, drop func() bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !drop() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}

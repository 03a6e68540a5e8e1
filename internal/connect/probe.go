package connect

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// A Probe watches the connections a driver makes while a backend opens:
// whether one was established, the first bytes a server sent, whether the
// server closed it. Explain uses that to tell a refused port from one
// where another kind of server listens. After Abort, the probe closes
// every connection it saw and fails new dials, which frees a driver
// stuck in a handshake that takes no context.
type Probe struct {
	mu      sync.Mutex
	seen    Seen
	conns   map[*probeConn]struct{}
	aborted bool
	done    bool
}

// Seen is what a Probe saw.
type Seen struct {
	Connected  bool   // a connection was established
	DialErr    error  // the latest failed dial
	First      []byte // the first bytes a server sent (up to 64)
	PeerClosed bool   // a server closed a connection
}

// maxFirst is how many of the first bytes a Probe keeps.
const maxFirst = 64

// Seen returns what the probe saw so far.
func (p *Probe) Seen() Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seen
	s.First = append([]byte(nil), s.First...)
	return s
}

// errAborted is the error of a dial after Abort.
var errAborted = errors.New("connection set-up abandoned")

// DialFunc is the form of a dialer that takes a context.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial returns dial wrapped so that its connections are watched. A nil
// dial is a net.Dialer's.
func (p *Probe) Dial(dial DialFunc) DialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p.mu.Lock()
		aborted := p.aborted
		p.mu.Unlock()
		if aborted {
			return nil, errAborted
		}
		c, err := dial(ctx, network, addr)
		return p.Watch(c, err)
	}
}

// Watch records the outcome of a dial and wraps the connection.
func (p *Probe) Watch(c net.Conn, err error) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.seen.DialErr = err
		return nil, err
	}
	if p.aborted {
		c.Close()
		return nil, errAborted
	}
	if p.done {
		return c, nil
	}
	p.seen.Connected = true
	pc := &probeConn{Conn: c, p: p}
	if p.conns == nil {
		p.conns = make(map[*probeConn]struct{})
	}
	p.conns[pc] = struct{}{}
	if sc, ok := c.(syscall.Conn); ok {
		// Drivers check a pooled connection's liveness on its file
		// descriptor (go-sql-driver/mysql, go-redis): keep it visible.
		return &probeSysConn{pc, sc}, nil
	}
	return pc, nil
}

// probeSysConn is a probeConn on a connection with a file descriptor.
type probeSysConn struct {
	*probeConn
	sc syscall.Conn
}

func (c *probeSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// Abort closes every connection the probe saw and fails later dials.
func (p *Probe) Abort() {
	p.mu.Lock()
	p.aborted = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// Done stops watching: connections made so far stay open and no longer
// report to the probe, and later dials pass through unwrapped.
func (p *Probe) Done() {
	p.mu.Lock()
	p.conns = nil
	p.done = true
	p.mu.Unlock()
}

// probeConn is a connection watched by a Probe; once the first bytes are
// seen (or the probe is done) it costs one branch per read. Reads of one
// connection are assumed to come from one goroutine at a time, as in
// every driver.
type probeConn struct {
	net.Conn
	p    *Probe
	done bool // guarded by p.mu
}

func (c *probeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.done {
		return n, err
	}
	c.p.mu.Lock()
	if len(c.p.seen.First) < maxFirst && n > 0 {
		c.p.seen.First = append(c.p.seen.First, b[:min(n, maxFirst-len(c.p.seen.First))]...)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		c.p.seen.PeerClosed = true
	}
	if _, watched := c.p.conns[c]; !watched || len(c.p.seen.First) >= maxFirst {
		c.done = true
	}
	c.p.mu.Unlock()
	return n, err
}

func (c *probeConn) Close() error {
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
	return c.Conn.Close()
}

// SetDeadline and the others pass through; embedding gives them.
var _ net.Conn = (*probeConn)(nil)

// DialTimeout adapts a Probe to dialers of the form net.DialTimeout has
// (go-zookeeper's).
func (p *Probe) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Dial(nil)(ctx, network, addr)
}

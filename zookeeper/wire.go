package zookeeper

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/connect"
)

// wire watches the bytes of the connections that a Backend made with
// Open. ZooKeeper answers every request of a session (pings included) in
// order and go-zookeeper shows neither the session timeout the server
// granted nor its pings, so the wire is where the backend learns:
//
//   - the negotiated session timeout and the session id, from the connect
//     response;
//   - alive: the send time of the latest request (ping, read, write) that
//     the server has answered. The server had heard from the session at that
//     moment, so the session cannot expire before alive + session timeout.
//     This is the clock that makes a lease lost when a connection goes
//     quiet, whether or not go-zookeeper has noticed the disconnect yet;
//   - how many requests of each kind were sent and how many watch
//     notifications arrived (Stats).
//
// It also sends the one request go-zookeeper cannot: addWatch (ZooKeeper
// 3.6), which sets the persistent recursive watch that guards the holds
// of a backend holding many (see Backend.RenewBatch). The request is
// written between two of go-zookeeper's frames with an xid go-zookeeper
// never uses; its answer reaches go-zookeeper as a stray frame, which it
// logs and drops, and the watch's notifications reach the backend's event
// callback like those of any watch.
type wire struct {
	base  time.Time    // monotonic origin of alive
	alive atomic.Int64 // nanoseconds since base; 0 = never
	// session is called with the session id and the negotiated timeout
	// when a connect response arrives (id 0: the session expired). It
	// runs on go-zookeeper's connection goroutine before the matching
	// state event.
	session func(id int64, timeout time.Duration)

	ops    [opSlots]atomic.Int64
	notify atomic.Int64

	// probe watches the connections until the first session, so that a
	// failed Open can say why and close what go-zookeeper still
	// waits on.
	probe connect.Probe
	// refused fires when every server refused a connection before the
	// first session (nil: never).
	refused *connect.Refusals

	// The recursive watch on root ("" for none). A connection's
	// generation is its rank among the connections made (see conns).
	root        string
	armMu       sync.Mutex                    // one addWatch at a time
	conns       atomic.Uint32                 // connections made so far: the latest's generation
	cur         atomic.Pointer[wireConn]      // the latest connection
	sent        atomic.Uint32                 // the generation on which addWatch was written
	armed       atomic.Uint32                 // the generation whose addWatch the server accepted
	unsupported atomic.Bool                   // a server refused addWatch (older than 3.6): never again
	armedCh     atomic.Pointer[chan struct{}] // closed when an addWatch is answered
}

// opSlots covers the opcodes that go-zookeeper sends, mapped by opSlot.
const opSlots = 25

// opSlot maps an opcode to a counter slot.
func opSlot(op int32) int {
	switch {
	case op >= 0 && op < 22:
		return int(op)
	case op == -11: // close
		return 22
	case op == opAddWatch:
		return 24
	default: // setAuth (100), setWatches (101) and anything else
		return 23
	}
}

var opNames = [opSlots]string{
	1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	6: "getACL", 7: "setACL", 8: "getChildren", 9: "sync", 11: "ping",
	12: "getChildren2", 13: "check", 14: "multi", 16: "reconfig",
	19: "createContainer", 21: "createTTL", 22: "closeSession", 23: "other",
	24: "addWatch",
}

func (w *wire) markAlive(t time.Time) {
	ns := int64(t.Sub(w.base))
	if ns <= 0 {
		ns = 1
	}
	for {
		old := w.alive.Load()
		if ns <= old || w.alive.CompareAndSwap(old, ns) {
			return
		}
	}
}

// lastAlive returns the send time of the latest answered request, or the
// zero time.
func (w *wire) lastAlive() time.Time {
	ns := w.alive.Load()
	if ns == 0 {
		return time.Time{}
	}
	return w.base.Add(time.Duration(ns))
}

// dial is the zk.Dialer of a Backend's own connection.
func (w *wire) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := w.probe.DialTimeout(network, addr, timeout)
	w.refused.Note(addr, err)
	if err != nil {
		return nil, err
	}
	wc := &wireConn{Conn: c, w: w, pending: make(map[int32][]time.Time)}
	wc.out.frame = wc.sent
	wc.in.frame = wc.received
	wc.gen = w.conns.Add(1)
	w.cur.Store(wc)
	return wc, nil
}

// addWatch protocol: the opcode, the mode PERSISTENT_RECURSIVE, and the
// xid of the request (go-zookeeper uses 1 up for its requests, -1 for
// notifications, -2 for pings, -8 for setWatches).
const (
	opAddWatch         = 106
	addWatchRecursive  = 1
	addWatchXid        = -106
	errUnimplementedZK = -6
)

// watchGen returns the generation of the current connection when the
// recursive watch is set on it (the server accepted it), else 0.
func (w *wire) watchGen() uint32 {
	g := w.conns.Load()
	if g != 0 && w.armed.Load() == g {
		return g
	}
	return 0
}

// sentGen returns the generation of the current connection when addWatch
// has been written on it, else 0. A request written after sentGen returned
// g, and answered while watchGen still returns g, was processed by the
// server after the watch was set: every later change under root has its
// notification delivered before that answer's successors.
func (w *wire) sentGen() uint32 {
	g := w.conns.Load()
	if g != 0 && w.sent.Load() == g {
		return g
	}
	return 0
}

// arm sets the recursive watch on the current connection, unless it is
// set or asked for already, or the servers do not know addWatch, and waits
// until the server answers or ctx ends. It returns the connection's
// generation if the watch is set, else 0.
func (w *wire) arm(ctx context.Context) uint32 {
	if w.root == "" || w.unsupported.Load() {
		return 0
	}
	c := w.cur.Load()
	if c == nil {
		return 0
	}
	var ch chan struct{}
	w.armMu.Lock()
	if w.sent.Load() != c.gen {
		ch = make(chan struct{})
		w.armedCh.Store(&ch)
		if !c.inject(addWatchFrame(w.root)) {
			w.armMu.Unlock()
			return 0
		}
		w.sent.Store(c.gen)
	} else if p := w.armedCh.Load(); p != nil {
		ch = *p
	} else {
		w.armMu.Unlock()
		return w.watchGen() // answered already
	}
	w.armMu.Unlock()
	t := time.NewTimer(armWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C: // the connection was lost meanwhile, say
	}
	return w.watchGen()
}

// armWait bounds the wait for the answer to addWatch.
const armWait = 5 * time.Second

// addWatchFrame encodes addWatch(path, PERSISTENT_RECURSIVE).
func addWatchFrame(path string) []byte {
	n := 4 + 4 + 4 + len(path) + 4
	b := make([]byte, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	xid := int32(addWatchXid)
	binary.BigEndian.PutUint32(b[4:], uint32(xid))
	binary.BigEndian.PutUint32(b[8:], opAddWatch)
	binary.BigEndian.PutUint32(b[12:], uint32(len(path)))
	copy(b[16:], path)
	binary.BigEndian.PutUint32(b[16+len(path):], addWatchRecursive)
	return b
}

// connectXid stands for the connect request, which has no header.
const connectXid = -1 << 31

// wireConn is one TCP connection to a server, seen by a wire.
type wireConn struct {
	net.Conn
	w *wire

	wmu sync.Mutex // guards out and sent frames' bookkeeping on the writer side
	out frames
	rmu sync.Mutex
	in  frames

	mu      sync.Mutex
	pending map[int32][]time.Time // send times of unanswered requests by xid
	now     time.Time             // time of the write being scanned

	gen     uint32      // the connection's generation (see wire.conns)
	session atomic.Bool // the server granted a session on it: requests may follow
}

// Write writes p under wmu, so that a frame the wire injects (see inject)
// falls between two of go-zookeeper's.
func (c *wireConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// Record before writing: the answer may be read before Write returns.
	c.now = time.Now()
	c.out.feed(p)
	return c.Conn.Write(p)
}

// inject writes the request frame p between two of go-zookeeper's frames,
// once the connection has a session; it reports whether it did.
func (c *wireConn) inject(p []byte) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// go-zookeeper writes a whole frame per Write: between two Writes
	// the stream is at a frame's boundary.
	if !c.session.Load() || c.out.have != 0 || c.out.skip != 0 {
		return false
	}
	c.now = time.Now()
	c.out.feed(p)
	_, err := c.Conn.Write(p)
	return err == nil
}

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.rmu.Lock()
		c.in.feed(p[:n])
		c.rmu.Unlock()
	}
	return n, err
}

// sent handles the head of a request frame written to the server.
func (c *wireConn) sent(head []byte, first bool) {
	xid := int32(connectXid)
	if !first {
		if len(head) < 8 {
			return
		}
		xid = int32(binary.BigEndian.Uint32(head))
		c.w.ops[opSlot(int32(binary.BigEndian.Uint32(head[4:])))].Add(1)
	}
	c.mu.Lock()
	c.pending[xid] = append(c.pending[xid], c.now)
	c.mu.Unlock()
}

// received handles the head of a frame read from the server.
func (c *wireConn) received(head []byte, first bool) {
	xid := int32(connectXid)
	if !first {
		if len(head) < 4 {
			return
		}
		xid = int32(binary.BigEndian.Uint32(head))
		if xid == -1 { // a watch notification, not an answer
			c.w.notify.Add(1)
			return
		}
	}
	c.mu.Lock()
	q := c.pending[xid]
	var at time.Time
	if len(q) > 0 {
		at = q[0]
		if len(q) == 1 {
			delete(c.pending, xid)
		} else {
			c.pending[xid] = q[1:]
		}
	}
	c.mu.Unlock()
	if first {
		// protocolVersion int32, timeOut int32, sessionId int64, passwd ...
		if len(head) < 16 {
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(head[4:]))) * time.Millisecond
		id := int64(binary.BigEndian.Uint64(head[8:]))
		if id != 0 && !at.IsZero() {
			c.w.markAlive(at)
		}
		c.session.Store(id != 0)
		if c.w.session != nil {
			c.w.session(id, timeout)
		}
		return
	}
	if !at.IsZero() {
		c.w.markAlive(at)
	}
	if xid == addWatchXid && len(head) >= 16 {
		switch code := int32(binary.BigEndian.Uint32(head[12:])); code {
		case 0:
			c.w.armed.Store(c.gen)
		case errUnimplementedZK:
			c.w.unsupported.Store(true)
		}
		if p := c.w.armedCh.Load(); p != nil && c.w.armedCh.CompareAndSwap(p, nil) {
			close(*p)
		}
	}
}

// frames splits a byte stream of length-prefixed ZooKeeper frames and
// hands the first bytes of each frame to frame; it keeps no more than a
// frame's head in memory.
type frames struct {
	frame func(head []byte, first bool)
	buf   [4 + 16]byte
	have  int // bytes of buf filled
	want  int // head bytes wanted after the length
	rest  int // bytes of the current frame after its head
	skip  int // bytes of the current frame left to skip
	seen  bool
}

func (f *frames) feed(p []byte) {
	for len(p) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(p))
			f.skip -= k
			p = p[k:]
			continue
		}
		if f.have < 4 {
			k := copy(f.buf[f.have:4], p)
			f.have += k
			p = p[k:]
			if f.have < 4 {
				return
			}
			n := int(int32(binary.BigEndian.Uint32(f.buf[:4])))
			if n < 0 {
				n = 0
			}
			f.want = min(n, 16)
			f.rest = n - f.want
		}
		if f.have < 4+f.want {
			k := copy(f.buf[f.have:4+f.want], p)
			f.have += k
			p = p[k:]
			if f.have < 4+f.want {
				return
			}
		}
		first := !f.seen
		f.seen = true
		f.frame(f.buf[4:4+f.want], first)
		f.have, f.skip = 0, f.rest
	}
}

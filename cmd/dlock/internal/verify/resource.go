package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
)

// Resource is the fenced resource of a run: a counter on loopback that
// workers read and then write with their lease's token. With the fence on
// it refuses a read or write whose token is below the highest it has seen,
// the guard of package fence (a read must register its token too: else a
// stale holder's write can land between a new holder's read and write,
// and the new holder's write then loses it); with it off (the fence-off mutation) it accepts
// every write. It logs every write, in the order it applied or refused
// them, as JSON lines: the ground truth for check (c).
//
// A read-write lock's readers read with SHARED: readers hold the lock
// together, so a shared read is refused only below the highest token of a
// writer's (a reader whose lock a later writer took), and it does not
// raise the bar for other readers; a writer is refused below any token,
// a reader's included, since a writer's token is above every grant made
// before it. A semaphore's permits do not use the fence at all: up to N
// of them are valid at once and a single token cannot tell them apart;
// they say HOLD, which only lets the fault scheduler find them inside
// their hold.
//
// The protocol is one line per request:
//
//	HELLO worker pid   → OK        (who is on this connection)
//	READ token         → value     (the token is fenced like a write's)
//	SHARED token       → value | STALE (a reader's read, fenced by writers' tokens)
//	HOLD               → OK        (a permit holder; not fenced, not logged)
//	WRITE token read value → OK | STALE
type Resource struct {
	ln    net.Listener
	fence bool
	log   io.Writer
	// onRead is called after a READ was answered, with the worker and its
	// pid: the hook the fault scheduler uses to hit a worker inside its
	// critical section.
	onRead func(worker, pid int)

	mu       sync.Mutex
	counter  int64
	top      uint64 // the highest token accepted
	topX     uint64 // the highest token of a writer's accepted (not a SHARED read)
	writes   int
	accepted int
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// NewResource listens on a free loopback port.
func NewResource(fence bool, log io.Writer, onRead func(worker, pid int)) (*Resource, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the fenced resource cannot listen: %w", err)
	}
	r := &Resource{ln: ln, fence: fence, log: log, onRead: onRead, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr is the resource's address.
func (r *Resource) Addr() string { return r.ln.Addr().String() }

// Counts returns the writes seen and accepted so far.
func (r *Resource) Counts() (writes, accepted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, r.accepted
}

// Close stops the resource and waits for its goroutines.
func (r *Resource) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

func (r *Resource) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go r.handle(c)
	}
}

func (r *Resource) handle(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
	}()
	worker, pid := -1, 0
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var reply string
		switch {
		case f[0] == "HELLO" && len(f) == 3:
			worker, _ = strconv.Atoi(f[1])
			pid, _ = strconv.Atoi(f[2])
			reply = "OK"
		case f[0] == "READ" && len(f) == 2:
			token, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				reply = "ERR bad read"
				break
			}
			reply = r.read(worker, token, false)
		case f[0] == "SHARED" && len(f) == 2:
			token, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				reply = "ERR bad shared read"
				break
			}
			reply = r.read(worker, token, true)
		case f[0] == "HOLD" && len(f) == 1:
			reply = "OK"
		case f[0] == "WRITE" && len(f) == 4:
			token, err1 := strconv.ParseUint(f[1], 10, 64)
			read, err2 := strconv.ParseInt(f[2], 10, 64)
			value, err3 := strconv.ParseInt(f[3], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				reply = "ERR bad write"
				break
			}
			reply = r.write(worker, token, read, value)
		default:
			reply = "ERR unknown request"
		}
		if _, err := io.WriteString(c, reply+"\n"); err != nil {
			return
		}
		if (f[0] == "READ" || f[0] == "SHARED" || f[0] == "HOLD") && reply != "STALE" && r.onRead != nil && worker >= 0 {
			r.onRead(worker, pid)
		}
	}
}

func (r *Resource) read(worker int, token uint64, shared bool) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := Write{T: Now(), Op: "read", Worker: worker, Token: token, Value: r.counter}
	bar := r.top
	if shared {
		w.Op, bar = "shared", r.topX
	}
	w.Accepted = !r.fence || token >= bar
	if w.Accepted {
		r.top = max(r.top, token)
		if !shared {
			r.topX = max(r.topX, token)
		}
	}
	r.logLocked(w)
	if !w.Accepted {
		return "STALE"
	}
	return strconv.FormatInt(r.counter, 10)
}

func (r *Resource) logLocked(w Write) {
	if b, err := json.Marshal(w); err == nil {
		r.log.Write(append(b, '\n'))
	}
}

func (r *Resource) write(worker int, token uint64, read, value int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := Write{T: Now(), Worker: worker, Token: token, Read: read, Value: value}
	w.Accepted = !r.fence || token >= r.top
	r.writes++
	if w.Accepted {
		r.accepted++
		r.counter = value
		r.top = max(r.top, token)
		r.topX = max(r.topX, token)
	}
	r.logLocked(w)
	if !w.Accepted {
		return "STALE"
	}
	return "OK"
}

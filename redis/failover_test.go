package redis_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// endpoint is one address in front of a Redis server that can be moved to
// another, as a managed service's primary endpoint moves on failover:
// Move cuts every connection, and new ones reach the new server.
type endpoint struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newEndpoint(t testing.TB, target string) *endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	e.wg.Add(1)
	go e.accept()
	t.Cleanup(func() {
		ln.Close()
		e.cut()
		e.wg.Wait()
	})
	return e
}

func (e *endpoint) Addr() string { return e.ln.Addr().String() }

// Move makes the endpoint lead to target from now on.
func (e *endpoint) Move(target string) {
	e.mu.Lock()
	e.target = target
	e.mu.Unlock()
	e.cut()
}

func (e *endpoint) cut() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.conns {
		c.Close()
	}
}

// track adds c to the connections Move cuts.
func (e *endpoint) track(c net.Conn) {
	e.mu.Lock()
	e.conns[c] = struct{}{}
	e.mu.Unlock()
}

func (e *endpoint) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		target := e.target
		e.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		e.track(c)
		e.track(s)
		e.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer e.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			e.mu.Lock()
			delete(e.conns, dst)
			delete(e.conns, src)
			e.mu.Unlock()
		}
		go pipe(c, s)
		go pipe(s, c)
	}
}

// TestFailoverBehindOneAddress: a plain redis://HOST (one address), and
// New on a plain client, whose address moves to a replica that missed the
// last grant: the next grant's token is above the lost grant's, which a
// paused holder still carries (ClockTokens is the default on every
// topology). With counter tokens (ClockTokens(false), the old default for
// one address) it repeated the lost grant's token.
func TestFailoverBehindOneAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T, addr string) *dlock.Client
	}{
		{"Open", func(t *testing.T, addr string) *dlock.Client {
			c, err := dlock.Open(ctxFor(t, time.Minute), "redis://"+addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
		{"New", func(t *testing.T, addr string) *dlock.Client {
			return newDlock(t, newBackend(t, addr))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			g := testserver.RedisN(t, 2)
			primary, replica := g.Node(0), g.Node(1)
			host, port, _ := net.SplitHostPort(primary.Addr())
			if _, err := replica.Do(ctx, "REPLICAOF", host, port); err != nil {
				t.Fatal(err)
			}
			waitLinked(t, replica)
			ep := newEndpoint(t, primary.Addr())
			c := tc.open(t, ep.Addr())

			// A grant and release that reach the replica...
			l1, err := c.Mutex("failover").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l1.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := primary.Do(ctx, "WAIT", "1", "5000"); err != nil || n != int64(1) {
				t.Fatalf("WAIT for the replica: %v, %v", n, err)
			}
			// ... then the replica falls behind, and a grant that it
			// never gets: its holder pauses.
			if _, err := replica.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatal(err)
			}
			l2, err := c.Mutex("failover", dlock.TTL(time.Minute)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Failover: the address now leads to the replica.
			ep.Move(replica.Addr())
			var l3 *dlock.Lease
			for i := 0; ; i++ {
				l3, err = c.Mutex("failover").TryLock(ctx)
				if err == nil || !errors.Is(err, dlock.ErrBackendUnavailable) || i == 50 {
					break
				}
				time.Sleep(20 * time.Millisecond) // the connections cut by the move
			}
			if err != nil {
				t.Fatalf("TryLock after the failover: %v", err)
			}
			defer l3.Unlock(ctx)
			if l3.Token() <= l2.Token() {
				t.Errorf("token after the failover %d is not above the lost grant's %d (the one before: %d)", l3.Token(), l2.Token(), l1.Token())
			}
		})
	}
}

// waitLinked waits until replica's link to its master is up.
func waitLinked(t *testing.T, replica *testserver.RedisServer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := replica.Do(context.Background(), "INFO", "replication")
		if s, _ := info.(string); err == nil && strings.Contains(s, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not link to its master in 15s: %v %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockWaiting starts Lock on m and returns once the backend has queued it
// (OnWait was called), with a channel for the result.
func lockWaiting(t *testing.T, c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) <-chan lockResult {
	t.Helper()
	waiting := make(chan struct{})
	var once sync.Once
	opts = append(opts, dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) }))
	res := make(chan lockResult, 1)
	go func() {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		res <- lockResult{l, err, time.Now()}
	}()
	select {
	case <-waiting:
	case r := <-res:
		t.Fatalf("Lock(%q) returned (%v, %v) instead of waiting", name, r.l, r.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Lock(%q) neither waited nor returned", name)
	}
	return res
}

type lockResult struct {
	l   *dlock.Lease
	err error
	at  time.Time
}

// TestRequestCounts checks the cost of the operations in requests: an
// uncontended acquisition is one multi (create + setData, whose answer
// shows the node is the only child), a release one delete.
func TestRequestCounts(t *testing.T) {
	// The production default: empty containers are reaped after a minute,
	// not between two rounds of this test.
	srv := zkServer(t, testserver.WithJVMProperty("znode.container.checkIntervalMs", "60000"))
	b := connect(t, []string{srv.Addr()})
	c := client(t, b)
	m := c.Mutex("counts")
	l, err := m.Lock(ctxT(t, time.Minute)) // creates the root and the container
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		before := b.Stats()
		l, err := m.Lock(ctxT(t, time.Minute))
		if errors.Is(err, dlock.ErrBackendUnavailable) {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		acquired := b.Stats()
		if err := l.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		released := b.Stats()
		acq, rel := diff(before, acquired), diff(acquired, released)
		if want := map[string]int64{"multi": 1}; !sameCounts(acq, want) {
			t.Errorf("uncontended acquire sent %v, want %v", acq, want)
		}
		if want := map[string]int64{"delete": 1}; !sameCounts(rel, want) {
			t.Errorf("release sent %v, want %v", rel, want)
		}
	}
}

// TestHandOffRequests checks that a waiter next in line is granted by the
// holder's release without a request of its own: the watch on the holder's
// node reports its deletion, and no node can be queued ahead of it.
func TestHandOffRequests(t *testing.T) {
	srv := zkServer(t)
	servers := []string{srv.Addr()}
	hb, wb := connect(t, servers), connect(t, servers)
	holder, err := client(t, hb).Mutex("handoff").Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res := lockWaiting(t, client(t, wb), "handoff", ctxT(t, time.Minute))
		before := wb.Stats()
		if err := holder.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if r.err != nil {
			t.Fatalf("round %d: waiter: %v", i, r.err)
		}
		if got := diff(before, wb.Stats()); len(got) != 0 {
			t.Errorf("round %d: the waiter sent %v after the release, want nothing", i, got)
		}
		if r.l.Token() <= holder.Token() {
			t.Errorf("round %d: token %d after %d", i, r.l.Token(), holder.Token())
		}
		// The next round's holder is on the other backend.
		hb, wb = wb, hb
		holder = r.l
	}
	holder.Unlock(ctxT(t, time.Minute))
}

func diff(a, b zookeeper.Stats) map[string]int64 {
	d := make(map[string]int64)
	for op, n := range b.Requests {
		if op == "ping" {
			continue
		}
		if n -= a.Requests[op]; n != 0 {
			d[op] = n
		}
	}
	return d
}

func sameCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHerd queues 20 waiters, each with its own session, and checks that
// every release wakes at most two of them (the next in line, and the one
// after it, which watches the node two ahead): that many watch
// notifications in total per release, counted on the wire of all 21
// sessions; that the lock passes on in arrival order; and that the second
// in line, woken by the release before, has read the queue by the time
// its predecessor releases, so that this release grants it without a
// request of its own.
func TestHerd(t *testing.T) {
	const waiters = 20
	srv := zkServer(t)
	servers := []string{srv.Addr()}
	hb := connect(t, servers)
	name := "herd"
	holder, err := client(t, hb).Mutex(name).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	backends := []*zookeeper.Backend{hb}
	results := make([]<-chan lockResult, waiters)
	for i := range waiters {
		b := connect(t, servers)
		backends = append(backends, b)
		results[i] = lockWaiting(t, client(t, b), name, ctxT(t, time.Minute))
	}
	events := func() int64 {
		var n int64
		for _, b := range backends {
			n += b.Stats().WatchEvents
		}
		return n
	}
	before := events()
	if before != 0 {
		t.Errorf("%d watch events before any release", before)
	}
	release := holder
	for i := range waiters {
		base, own := events(), backends[i+1].Stats()
		var second zookeeper.Stats
		if i+1 < waiters {
			second = backends[i+2].Stats()
		}
		if err := release.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		var r lockResult
		select {
		case r = <-results[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d (next in line) not granted 30s after release %d", i, i)
		}
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if got := diff(own, backends[i+1].Stats()); len(got) != 0 {
			t.Errorf("waiter %d sent %v after release %d, want nothing", i, got, i)
		}
		// The others stay put.
		for j := i + 1; j < waiters; j++ {
			select {
			case r := <-results[j]:
				t.Fatalf("waiter %d returned (%v, %v) out of turn after release %d", j, r.l, r.err, i)
			default:
			}
		}
		want := int64(1)
		if i+1 < waiters {
			want = 2
			// The one after it looks at the queue once, and finds
			// its predecessor holding the lock.
			waitFor(t, fmt.Sprintf("waiter %d to read the queue after release %d", i+1, i), func() bool {
				return diff(second, backends[i+2].Stats())["getChildren2"] >= 1
			})
		}
		waitFor(t, fmt.Sprintf("%d watch notifications after release %d", want, i), func() bool { return events()-base >= want })
		if n := events() - base; n != want {
			t.Errorf("release %d caused %d watch notifications, want %d", i, n, want)
		}
		release = r.l
	}
	if err := release.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d releases, %d watch notifications in all", waiters+1, events()-before)
}

// waitFor polls cond for up to 30 seconds and fails the test if it stays
// false.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// TestHolderSessionKilled cuts the holder's connection for good (its
// session is not closed) and checks that the holder's lease is reported
// lost before the waiter is granted, and that the waiter is granted within
// the session timeout plus a small bound.
func TestHolderSessionKilled(t *testing.T) {
	const session = 2 * time.Second
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	hb := connect(t, []string{px.Addr()}, zookeeper.SessionTimeout(session))
	if got := hb.SessionTimeout(); got != session {
		t.Fatalf("granted session timeout %v, want %v", got, session)
	}
	wb := connect(t, []string{srv.Addr()})
	name := "killed"
	held, err := client(t, hb).Mutex(name, dlock.TTL(session)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting := lockWaiting(t, client(t, wb), name, ctxT(t, time.Minute))
	time.Sleep(session / 2) // some renewals and pings
	cut := time.Now()
	px.Block()
	var r lockResult
	select {
	case r = <-waiting:
	case <-time.After(session + 10*time.Second):
		t.Fatalf("waiter not granted %v after the holder's connection was cut", time.Since(cut))
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Unlock(context.Background())
	took := r.at.Sub(cut)
	t.Logf("waiter granted %v after the cut (session timeout %v)", took, session)
	if took < session/3 {
		t.Errorf("waiter granted %v after the cut, before the session could expire", took)
	}
	if bound := session + 2*time.Second; took > bound {
		t.Errorf("waiter granted %v after the cut, want at most %v", took, bound)
	}
	select {
	case <-held.Done():
	default:
		t.Fatalf("the holder's lease was not over when the waiter was granted")
	}
	if err := held.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("holder's Err() = %v, want ErrLeaseLost", err)
	}
	if r.l.Token() <= held.Token() {
		t.Errorf("token %d after the holder's session ended is not above %d", r.l.Token(), held.Token())
	}
}

// TestLossOnDisconnect checks the disconnect policy: a short connection
// cut ends the holder's lease, and when the session reconnects its node is
// deleted so the waiter gets the lock long before the session timeout.
func TestLossOnDisconnect(t *testing.T) {
	const session = 20 * time.Second
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	hb := connect(t, []string{px.Addr()}, zookeeper.SessionTimeout(session), zookeeper.Loss(zookeeper.LossOnDisconnect))
	wb := connect(t, []string{srv.Addr()})
	name := "blip"
	// With a TTL this long the Client's first renewal comes at least 3.5 s
	// after the grant (TTL/3, less the batching window of TTL/10): a loss
	// seen sooner was pushed by the backend (ReportLoss).
	ttl := 15 * time.Second
	held, err := client(t, hb).Mutex(name, dlock.TTL(ttl)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting := lockWaiting(t, client(t, wb), name, ctxT(t, time.Minute))
	cut := time.Now()
	px.Block()
	select {
	case <-held.Done():
	case <-time.After(ttl / 5):
		t.Fatalf("lease not lost %v after the disconnect: the backend did not report the loss to the Client", time.Since(cut))
	}
	lost := time.Since(cut)
	if err := held.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "disconnect") {
		t.Errorf("Err() = %v, want ErrLeaseLost for the disconnect", err)
	}
	time.Sleep(500 * time.Millisecond)
	px.Unblock()
	var r lockResult
	select {
	case r = <-waiting:
	case <-time.After(session / 2):
		t.Fatalf("waiter not granted %v after the reconnection", session/2)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("lease lost %v after the disconnect; waiter granted %v after it", lost, r.at.Sub(cut))
	if r.l.Token() <= held.Token() {
		t.Errorf("token %d is not above %d", r.l.Token(), held.Token())
	}
	r.l.Unlock(context.Background())
}

// TestReconnectKeepsLock cuts the holder's connection for less than the
// session timeout: with the default policy the lease goes on, and the lock
// stays held by the same node.
func TestReconnectKeepsLock(t *testing.T) {
	const session = 6 * time.Second
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	hb := connect(t, []string{px.Addr()}, zookeeper.SessionTimeout(session))
	ob := connect(t, []string{srv.Addr()})
	other := client(t, ob)
	name := "blip"
	held, err := client(t, hb).Mutex(name, dlock.TTL(session)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	px.Block()
	time.Sleep(session / 3)
	px.Unblock()
	time.Sleep(session) // more than a TTL: renewals must have worked again
	if err := held.Err(); err != nil {
		t.Fatalf("lease lost after a %v disconnect: %v", session/3, err)
	}
	mustBeHeldBy(t, other, ob, name, held)
	if err := held.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// mustBeHeldBy checks with Inspect and TryLock that name is held with the
// lease's owner and token.
func mustBeHeldBy(t *testing.T, c *dlock.Client, b *zookeeper.Backend, name string, l *dlock.Lease) {
	t.Helper()
	x, err := c.Mutex(name).TryLock(ctxT(t, time.Minute))
	if err == nil {
		x.Unlock(context.Background())
		t.Fatalf("TryLock(%q) succeeded: the lock is not held", name)
	}
	var held *dlock.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != l.Owner() || held.Holder.Token != l.Token() {
		t.Fatalf("TryLock(%q): %v, want it held by %q with token %d", name, err, l.Owner(), l.Token())
	}
	infos, err := b.Inspect(ctxT(t, time.Minute), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != name || infos[0].Token != l.Token() || infos[0].Owner != l.Owner() {
		t.Fatalf("Inspect = %+v, want %q held by %q with token %d", infos, name, l.Owner(), l.Token())
	}
}

// TestEnsembleFailover runs on 3 servers: killing the server the holder is
// connected to, and then the leader, moves the client to another server
// within the session timeout, and it keeps the lock with the same token.
func TestEnsembleFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	const session = 4 * time.Second
	g := testserver.ZooKeeperEnsemble(t, 3)
	hb := connect(t, g.Addrs(), zookeeper.SessionTimeout(session))
	ob := connect(t, g.Addrs(), zookeeper.SessionTimeout(session))
	other := client(t, ob, dlock.TTL(session))
	name := "failover"
	held, err := client(t, hb).Mutex(name, dlock.TTL(session)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	index := func(addr string) int {
		for i, a := range g.Addrs() {
			if a == addr {
				return i
			}
		}
		t.Fatalf("connected to %q, not one of %v", addr, g.Addrs())
		return -1
	}
	check := func(what string, killed int) {
		t.Helper()
		from := hb.Conn().Server()
		start := time.Now()
		if err := g.Node(killed).Kill(); err != nil {
			t.Fatal(err)
		}
		if _, err := g.WaitLeader(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		// Wait until the holder is connected to a live server and has
		// renewed since, then some more.
		deadline := time.Now().Add(2 * session)
		for hb.Conn().State() != zk.StateHasSession || hb.Conn().Server() == g.Node(killed).Addr() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: holder not reconnected after %v", what, time.Since(start))
			}
			time.Sleep(10 * time.Millisecond)
		}
		moved := time.Since(start)
		time.Sleep(session)
		if err := held.Err(); err != nil {
			t.Fatalf("%s: lease lost: %v", what, err)
		}
		if err := held.Extend(ctxT(t, time.Minute), session); err != nil {
			t.Fatalf("%s: Extend: %v", what, err)
		}
		mustBeHeldBy(t, other, ob, name, held)
		t.Logf("%s: holder moved from %s to %s in %v and keeps token %d", what, from, hb.Conn().Server(), moved, held.Token())
		if err := g.Node(killed).Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := g.WaitLeader(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	check("kill the holder's server", index(hb.Conn().Server()))
	leader, err := g.WaitLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	check("kill the leader", leader)
	if err := held.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	l, err := other.Mutex(name).TryLock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatalf("TryLock after the holder's Unlock: %v", err)
	}
	if l.Token() <= held.Token() {
		t.Errorf("token %d is not above %d", l.Token(), held.Token())
	}
	l.Unlock(context.Background())
}

// TestContainerReaped releases a lock until the server reaps its empty
// container, then takes it again: the token (the czxid) still increases,
// although the sequence numbers start again.
func TestContainerReaped(t *testing.T) {
	srv := zkServer(t, testserver.WithJVMProperty("znode.container.checkIntervalMs", "200"))
	b := connect(t, []string{srv.Addr()}, zookeeper.Root("/reap"))
	c := client(t, b)
	name := "reaped/lock"
	container := "/reap/reaped%2Flock"
	var last uint64
	for round := range 3 {
		l, err := c.Mutex(name).Lock(ctxT(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("round %d: token %d is not above %d", round, l.Token(), last)
		}
		kids, _, err := b.Conn().Children(container)
		if err != nil || len(kids) != 1 || !strings.HasSuffix(kids[0], "-lock-0000000000") {
			t.Fatalf("round %d: children %v, %v; want one node with sequence 0 in a new container", round, kids, err)
		}
		last = l.Token()
		if err := l.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			ok, _, err := b.Conn().Exists(container)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: container %s not reaped", round, container)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestCreateConnectionLoss cuts the connection right after the create
// request is sent, before its answer: the backend must find its node
// again after reconnecting, leaving neither an orphan nor a second node.
func TestCreateConnectionLoss(t *testing.T) {
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	b := connect(t, []string{px.Addr()}, zookeeper.SessionTimeout(10*time.Second))
	c := client(t, b, dlock.TTL(10*time.Second))
	var drops sync.WaitGroup
	drops.Add(1)
	var once sync.Once
	px.DropAfter(func(op int32) bool {
		if op != 14 { // multi: the create
			return false
		}
		dropped := false
		once.Do(func() { dropped = true; drops.Done() })
		return dropped
	})
	l, err := c.Mutex("lossy").Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	drops.Wait()
	kids, _, err := b.Conn().Children("/dlock/lossy")
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 1 {
		t.Fatalf("children after a lost create answer: %v, want exactly the holder's node", kids)
	}
	_, st, err := b.Conn().Get("/dlock/lossy/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Czxid) != l.Token() {
		t.Errorf("token %d, node czxid %d", l.Token(), st.Czxid)
	}
	if err := l.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if kids, _, err := b.Conn().Children("/dlock/lossy"); err == nil && len(kids) != 0 {
		t.Fatalf("children after release: %v", kids)
	}
}

// TestTokenIsCzxid checks that tokens are the czxid of the holder's node,
// and that a TTL over the session timeout is refused.
func TestTokenIsCzxid(t *testing.T) {
	srv := zkServer(t)
	b := connect(t, []string{srv.Addr()}, zookeeper.SessionTimeout(5*time.Second))
	c := client(t, b)
	l, err := c.Mutex("czxid", dlock.TTL(5*time.Second)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kids, _, err := b.Conn().Children("/dlock/czxid")
	if err != nil || len(kids) != 1 {
		t.Fatalf("children %v, %v", kids, err)
	}
	data, st, err := b.Conn().Get("/dlock/czxid/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Czxid) != l.Token() || st.EphemeralOwner != b.Conn().SessionID() {
		t.Errorf("token %d, node czxid %d, owner session 0x%x (ours 0x%x)", l.Token(), st.Czxid, st.EphemeralOwner, b.Conn().SessionID())
	}
	if want := fmt.Sprintf(`{"owner":%q,"count":1}`, l.Owner()); string(data) != want {
		t.Errorf("node data %s, want %s", data, want)
	}
	l.Unlock(context.Background())
	if _, err := c.Mutex("czxid", dlock.TTL(6*time.Second)).TryLock(ctxT(t, time.Minute)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TryLock with a TTL over the session timeout: %v, want ErrInvalidOption", err)
	}
}

// TestInspectWaiters checks that Inspect shows the holder, its reentry
// count and the waiters behind it.
func TestInspectWaiters(t *testing.T) {
	srv := zkServer(t)
	servers := []string{srv.Addr()}
	b := connect(t, servers)
	c := client(t, b)
	name := "inspect/me"
	outer, err := c.Mutex(name, dlock.Owner("job-42")).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Mutex(name, dlock.Owner("job-42")).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w1 := lockWaiting(t, client(t, connect(t, servers)), name, ctx)
	w2 := lockWaiting(t, client(t, connect(t, servers)), name, ctx)
	infos, err := c.Inspect(ctxT(t, time.Minute), "inspect/")
	if err != nil {
		t.Fatal(err)
	}
	want := dlock.LockInfo{Name: name, Owner: "job-42", Token: outer.Token(), Count: 2, Kind: dlock.KindMutex, Limit: 1, Weight: 1, Waiters: 2}
	if len(infos) != 1 || infos[0] != want {
		t.Errorf("Inspect = %+v, want [%+v]", infos, want)
	}
	cancel()
	for _, w := range []<-chan lockResult{w1, w2} {
		if r := <-w; !errors.Is(r.err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", r.err)
		}
	}
	inner.Unlock(context.Background())
	outer.Unlock(context.Background())
	if infos, err := c.Inspect(ctxT(t, time.Minute), ""); err != nil || len(infos) != 0 {
		t.Errorf("Inspect after release = %+v, %v; want none", infos, err)
	}
}

func TestOpenURL(t *testing.T) {
	srv := zkServer(t)
	c, err := dlock.Open(ctxT(t, time.Minute), "zk://"+srv.Addr()+"/via/url?session_timeout=5s&loss=disconnect")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := c.Backend().(*zookeeper.Backend)
	if b.SessionTimeout() != 5*time.Second {
		t.Errorf("session timeout %v, want 5s", b.SessionTimeout())
	}
	l, err := c.Mutex("x", dlock.TTL(5*time.Second)).TryLock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := b.Conn().Exists("/via/url/x"); !ok || err != nil {
		t.Errorf("lock container /via/url/x: %v, %v", ok, err)
	}
	l.Unlock(context.Background())
}

// TestSessionClock checks the backend's own clock: once the session
// timeout has passed since the last answered request while the connection
// is cut, a renewal says the lease is lost at once, without a server to
// tell it that the session expired.
func TestSessionClock(t *testing.T) {
	const session = 2 * time.Second
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	b := connect(t, []string{px.Addr()}, zookeeper.SessionTimeout(session))
	req := dlock.Request{Name: "clock", Owner: "me", TTL: session}
	g, _, err := b.Acquire(ctxT(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	if err := b.Renew(ctxT(t, time.Minute), h, session); err != nil {
		t.Fatalf("Renew while connected: %v", err)
	}
	cut := time.Now()
	px.Block()
	// Within the session timeout the renewal fails for want of a
	// connection, which does not mean loss.
	ctx, cancel := context.WithTimeout(context.Background(), session/4)
	err = b.Renew(ctx, h, session)
	cancel()
	if err == nil || errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Renew %v after the cut: %v, want a failure that is not ErrLeaseLost", time.Since(cut), err)
	}
	time.Sleep(time.Until(cut.Add(session + 100*time.Millisecond)))
	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	err = b.Renew(ctx, h, session)
	cancel()
	if !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "session timeout") {
		t.Fatalf("Renew %v after the cut: %v, want ErrLeaseLost for the session timeout", time.Since(cut), err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Renew took %v to say the lease is lost", d)
	}
	if err := b.Release(ctxT(t, time.Minute), h); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Release of the lost hold: %v, want ErrLeaseLost", err)
	}
	px.Unblock()
}

// TestNewOnCallerConn runs a backend on a connection the caller made.
func TestNewOnCallerConn(t *testing.T) {
	srv := zkServer(t)
	conn, events, err := zk.Connect([]string{srv.Addr()}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	b, err := zookeeper.New(conn, zookeeper.SessionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b, dlock.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other := client(t, connect(t, []string{srv.Addr()}), dlock.TTL(10*time.Second))
	l, err := c.Mutex("caller").Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Mutex("caller").TryLock(ctxT(t, time.Minute)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v", err)
	}
	if err := l.Extend(ctxT(t, time.Minute), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The Client released the lock; the connection is still the caller's.
	if _, _, err := conn.Children("/dlock"); err != nil {
		t.Fatalf("the caller's connection after Close: %v", err)
	}
	l2, err := other.Mutex("caller").TryLock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatalf("TryLock after the Client's Close: %v", err)
	}
	l2.Unlock(context.Background())
}

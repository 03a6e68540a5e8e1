package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childWaiter())
	}
	goleak.VerifyTestMain(m)
}

// fastElection makes etcd elect a leader within about a second and lowers
// its lease floor to 1 s (1.5 × the election timeout, rounded up).
var fastElection = testserver.WithArgs("--election-timeout", "500", "--heartbeat-interval", "50")

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open returns a backend on its own connection to endpoints, closed at the
// end of the test unless the caller closes it first.
func open(t testing.TB, endpoints []string, prefix string) *etcd.Backend {
	t.Helper()
	b, err := etcd.Open(ctxT(t, 10*time.Second), strings.Join(endpoints, ","), etcd.Prefix(prefix))
	if err != nil {
		t.Fatalf("etcd.Open: %v", err)
	}
	return b
}

// client returns a dlock Client on a new backend, closed at clean-up.
func client(t testing.TB, endpoints []string, prefix string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(open(t, endpoints, prefix), opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw returns a plain etcd client for looking at and meddling with the keys.
func raw(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestConformance(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	prefix := "conformance-" + fmt.Sprint(time.Now().UnixNano())
	names := open(t, []string{srv.Endpoint()}, prefix) // for the hook's key names
	t.Cleanup(func() { names.Close() })
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		return open(t, []string{srv.Endpoint()}, prefix)
	}, dlocktest.ShortTTL(time.Second), foreignHook(names, []string{srv.Endpoint()}))
}

func TestOpenURL(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	c, err := dlock.Open(ctx, "etcd://"+srv.Addr()+",127.0.0.1:1/url/test?dial-timeout=3s")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()
	if got := c.String(); !strings.Contains(got, srv.Addr()) || !strings.HasSuffix(got, "/url/test") {
		t.Errorf("String() = %q", got)
	}
	l, err := c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	resp, err := raw(t, []string{srv.Endpoint()}).Get(ctx, "url/test/n/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(l.Token()) {
		t.Errorf("key under url/test/n/: %v %v; want one with create revision %d", resp, err, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	start := time.Now()
	if c, err := dlock.Open(ctx, "etcd://127.0.0.1:1/x?dial-timeout=300ms"); !errors.Is(err, dlock.ErrBackendUnavailable) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Open of an endpoint where nothing listens: %v, want ErrBackendUnavailable", err)
	} else if time.Since(start) > 5*time.Second {
		t.Errorf("Open with dial-timeout=300ms took %v", time.Since(start))
	}
	for _, bad := range []string{"etcd:///x", "etcd://h:1,/x", "etcd://h:1/x?nope=1", "etcd://h:1/x?dial-timeout=soon"} {
		if c, err := dlock.Open(ctx, bad); !errors.Is(err, dlock.ErrInvalidOption) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// Names that contain "/" and "%" are separate locks from their prefixes
// and from each other's escapes, and Inspect finds them by prefix.
func TestNamesAreEscaped(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	a, b := client(t, eps, "esc"), client(t, eps, "esc")
	ctx := ctxT(t, time.Minute)
	names := []string{"a", "a/b", "a%2Fb", "a/", "a%", "ab"}
	var leases []*dlock.Lease
	for _, n := range names {
		l, err := a.Mutex(n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", n, err)
		}
		leases = append(leases, l)
	}
	infos, err := a.Inspect(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, in.Name)
	}
	if strings.Join(got, " ") != "a/ a/b" {
		t.Errorf("Inspect(\"a/\") = %q, want [a/ a/b]", got)
	}
	for i, l := range leases {
		if _, err := b.Mutex(names[i]).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock(%q) by another owner: %v, want ErrNotAcquired", names[i], err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock(%q): %v", names[i], err)
		}
	}
}

// Two goroutines of one process locking one name through one Client
// exclude each other (etcd's own Mutex on a shared Session does not).
func TestOneClientTwoGoroutines(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	c := client(t, []string{srv.Endpoint()}, "same")
	ctx := ctxT(t, time.Minute)
	m := c.Mutex("x")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l2, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock on the same Mutex while held: %v, want ErrNotAcquired", err)
	}
	select {
	case <-got:
		t.Fatal("a second goroutine of the same Client was granted the held lock")
	case <-time.After(500 * time.Millisecond):
	}
	tok := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		return
	}
	if l2.Token() <= tok {
		t.Errorf("second grant's token %d not above %d", l2.Token(), tok)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A TTL below etcd's whole seconds works: etcd keeps the key for a whole
// second or more, the client's lease is judged by the requested TTL, and
// the renewals keep the lock.
func TestSubSecondTTL(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	c, other := client(t, eps, "subsec"), client(t, eps, "subsec")
	ctx := ctxT(t, time.Minute)
	// Sub-second, but not MinTTL: a 100 ms lease renewed every 33 ms is lost
	// to one late renewal on a loaded machine (seen under -race), which is
	// the keeper doing its job, not what this test is about.
	const ttl = 500 * time.Millisecond
	l, err := c.Mutex("x", dlock.TTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(l.Deadline()); left > ttl {
		t.Errorf("deadline %v ahead, want at most the requested TTL %v", left, ttl)
	}
	time.Sleep(1500 * time.Millisecond) // longer than etcd's 1 s lease: renewals kept it
	if err := l.Err(); err != nil {
		t.Fatalf("lease with TTL %v lost while renewing: %v", ttl, err)
	}
	if _, err := other.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock by another owner: %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose etcd lease is revoked by someone else learns that it lost
// the lock at its next renewal, and the waiter behind it is granted.
func TestLeaseRevokedFromOutside(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	const ttl = 3 * time.Second
	h, w := client(t, eps, "revoke", dlock.TTL(ttl)), client(t, eps, "revoke")
	ctx := ctxT(t, time.Minute)
	held, err := h.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once sync.Once
	res := make(chan *dlock.Lease, 1)
	go func() {
		l, err := w.Mutex("x", dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) })).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		res <- l
	}()
	<-waiting
	cli := raw(t, eps)
	resp, err := cli.Get(ctx, "revoke/x/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(held.Token()) {
		t.Fatalf("holder's key: %v, %v", resp, err)
	}
	revoked := time.Now()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	l := <-res
	if l == nil {
		return
	}
	defer l.Unlock(ctx)
	if l.Token() <= held.Token() {
		t.Errorf("waiter's token %d not above the revoked holder's %d", l.Token(), held.Token())
	}
	select {
	case <-held.Done():
		t.Logf("holder learned of the loss %v after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(ttl):
		t.Fatalf("the revoked holder's lease is not Done %v after the revocation", ttl)
	}
	if err := held.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "expired or was revoked") {
		t.Errorf("revoked holder's Err() = %v, want ErrLeaseLost saying the lease is gone", err)
	}
	if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the revoked hold: %v, want ErrLeaseLost", err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("the new holder's lease after the old one's Unlock: %v", err)
	}
}

// A holder whose key is deleted by someone else (its lease still alive)
// learns at its next renewal that it lost the lock.
func TestKeyDeletedFromOutside(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	c := client(t, eps, "del", dlock.TTL(time.Second))
	ctx := ctxT(t, time.Minute)
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw(t, eps).Delete(ctx, "del/x/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not Done 5s after its key was deleted")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Err() = %v, want ErrLeaseLost saying the key is gone", err)
	}
}

// Extend to a longer TTL moves the key onto a longer lease without changing
// its token; a reentrant hold elsewhere follows the move.
func TestExtendMovesLease(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	a, a2 := client(t, eps, "ext", dlock.TTL(time.Second)), client(t, eps, "ext", dlock.TTL(time.Second))
	ctx := ctxT(t, time.Minute)
	outer, err := a.Mutex("x", dlock.Owner("job")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := a2.Mutex("x", dlock.Owner("job")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 {
		t.Fatalf("reentrant: token %d holds %d", inner.Token(), inner.Holds())
	}
	cli := raw(t, eps)
	leaseOf := func() (int64, int64) {
		resp, err := cli.Get(ctx, "ext/x/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("keys: %v %v", resp, err)
		}
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Kvs[0].Lease, ttl.GrantedTTL
	}
	before, _ := leaseOf()
	if err := outer.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	after, granted := leaseOf()
	if after == before || granted != 10 {
		t.Errorf("after Extend(10s) the key is on lease %x (granted %ds), before %x", after, granted, before)
	}
	time.Sleep(2 * time.Second) // both holds renew: the inner one adopts the new lease
	if err := outer.Err(); err != nil {
		t.Errorf("outer: %v", err)
	}
	if err := inner.Err(); err != nil {
		t.Errorf("inner after the move: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, _ := cli.Get(ctx, "ext/", clientv3.WithPrefix()); len(resp.Kvs) != 0 {
		t.Errorf("keys left after the last Unlock: %v", resp.Kvs)
	}
}

// Many holds of one Client are renewed together (one keep-alive stream and
// one read per 100 keys), and loss is still judged per hold: deleting one
// key loses that hold only.
func TestBatchRenewalLossPerHold(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	c := client(t, eps, "batch", dlock.TTL(time.Second))
	ctx := ctxT(t, time.Minute)
	const n = 150
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex(fmt.Sprintf("n%03d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	if _, err := raw(t, eps).Delete(ctx, "batch/n077/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	for i, l := range leases {
		err := l.Err()
		if i == 77 {
			if !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("hold whose key was deleted: Err() = %v, want ErrLeaseLost", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("hold %d lost after 2.5 TTLs of batched renewals: %v", i, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock %d: %v", i, err)
		}
	}
}

// A server that stops answering (SIGSTOP) makes the hold lost by its
// deadline, and once it answers again the same Client locks as before (the
// keep-alive stream that hung was reset and replaced).
func TestPausedServer(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	c := client(t, eps, "srvpause", dlock.TTL(2*time.Second))
	ctx := ctxT(t, time.Minute)
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	select {
	case <-l.Done():
		t.Logf("lease lost %v after the server stopped answering: %v", time.Since(paused).Round(time.Millisecond), l.Err())
	case <-time.After(4 * time.Second):
		t.Error("lease not over 4s after the server stopped answering (TTL 2s)")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the lost hold: %v, want ErrLeaseLost", err)
	}
	l2, err := c.Mutex("x").Lock(ctx) // waits for the old key's lease to expire, if it has not
	if err != nil {
		t.Fatalf("Lock after the server came back: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after the pause not above %d", l2.Token(), l.Token())
	}
	time.Sleep(3 * time.Second) // renewals work again
	if err := l2.Err(); err != nil {
		t.Errorf("new hold: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

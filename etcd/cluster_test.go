package etcd_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// The leader of a 3-member cluster is killed three times (and restarted)
// while a lock is held and waited for, and while six processes contend for
// another: no two holders at once, tokens only increase, work goes on after
// every election, and the leases survive because their keep-alives get
// through within the TTL.
func TestClusterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills etcd leaders: skipped under -short")
	}
	g := testserver.EtcdCluster(t, 3, fastElection)
	eps := g.Endpoints()
	const ttl = 4 * time.Second
	ctx := ctxT(t, 3*time.Minute)

	// A hold across all the elections, with a waiter behind it.
	long, err := client(t, eps, "cluster", dlock.TTL(ttl)).Mutex("long").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once sync.Once
	longNext := make(chan lockResult, 1)
	m := client(t, eps, "cluster", dlock.TTL(ttl)).Mutex("long",
		dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) }))
	go func() {
		l, err := m.Lock(ctx)
		longNext <- lockResult{l, err}
	}()
	<-waiting

	// Six processes taking turns on "hot".
	const workers = 6
	var (
		stop      atomic.Bool
		inside    atomic.Int32
		overlaps  atomic.Int32
		lastTok   atomic.Uint64
		backwards atomic.Int32
		grants    atomic.Int64
		lost      atomic.Int32
		errs      atomic.Int32
		wg        sync.WaitGroup
	)
	for w := range workers {
		c := client(t, eps, "cluster", dlock.TTL(ttl))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex("hot")
			for !stop.Load() {
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := m.Lock(lctx)
				cancel()
				if err != nil {
					if errs.Add(1) <= 5 {
						t.Logf("worker %d: Lock: %v", w, err)
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if last := lastTok.Load(); l.Token() <= last {
					backwards.Add(1)
					t.Errorf("token %d granted after token %d", l.Token(), last)
				}
				lastTok.Store(l.Token())
				grants.Add(1)
				runtime.Gosched()
				time.Sleep(2 * time.Millisecond)
				if err := l.Err(); err != nil {
					lost.Add(1)
					t.Errorf("worker %d: lease lost inside the critical section: %v", w, err)
				}
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrBackendUnavailable) {
					t.Errorf("worker %d: Unlock: %v", w, err)
				}
			}
		}()
	}

	for round := range 3 {
		leader, err := g.WaitLeader(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		before := grants.Load()
		killed := time.Now()
		if err := g.Node(leader).Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if err := g.Node(leader).Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := g.WaitLeader(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		// Work goes on after the election.
		mark := grants.Load()
		for grants.Load() < mark+20 && time.Since(killed) < 30*time.Second {
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("round %d: killed leader n%d; %d grants since, %d of them after the restart",
			round, leader+1, grants.Load()-before, grants.Load()-mark)
		if grants.Load() < mark+20 {
			t.Errorf("round %d: no progress within 30s of killing the leader", round)
		}
		if err := long.Err(); err != nil {
			t.Fatalf("round %d: the long hold was lost: %v", round, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d grants; %d Lock errors", grants.Load(), errs.Load())
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d grants overlapped another holder", n)
	}
	if n := backwards.Load() + lost.Load(); n > 0 {
		t.Errorf("%d tokens went backwards or leases were lost", n)
	}

	// The waiter that waited through all the elections gets the lock next.
	select {
	case r := <-longNext:
		t.Fatalf("the waiter on the long hold returned while it was held: %v, %v", r.l, r.err)
	default:
	}
	if err := long.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the long hold: %v", err)
	}
	select {
	case r := <-longNext:
		if r.err != nil {
			t.Fatalf("waiter on the long hold: %v", r.err)
		}
		if r.l.Token() <= long.Token() {
			t.Errorf("waiter's token %d not above the long hold's %d", r.l.Token(), long.Token())
		}
		r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter on the long hold was not granted within 20s of its release")
	}
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

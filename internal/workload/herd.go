package workload

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// herdRun is one run of the Herd workload (see dlocktest.BenchHerd for what it reports).
type herdRun struct {
	sp     *Span
	cfg    Config
	cnt    *calls
	cancel context.CancelFunc

	mu          sync.Mutex // guards what follows
	grants      int
	lastRelease time.Time
	turn        chan struct{} // closed at the next grant
	handoffs    []time.Duration
	ended       bool
	end         snapshot
	endStore    int64
}

// Herd runs w waiters on one name over several Clients made with opts,
// measuring the grants sp allows.
func Herd(newBackend BackendFunc, opts []dlock.Option, cfg Config, w int, sp *Span) (Result, error) {
	h := &herdRun{sp: sp, cfg: cfg, cnt: new(calls), turn: make(chan struct{})}
	clients := make([]*dlock.Client, max(1, min(cfg.HerdClients, w)))
	for i := range clients {
		be, err := newBackend()
		if err == nil {
			clients[i], err = dlock.New(counted(be, h.cnt), opts...)
			if err != nil {
				be.Close()
			}
		}
		if err != nil {
			return Result{}, err
		}
		defer clients[i].Close()
	}
	name := namePrefix() + "herd"
	bg := context.Background()
	gate, err := clients[0].Mutex(name).Lock(bg)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	h.cancel = cancel
	var wg sync.WaitGroup
	for g := range w {
		wg.Go(func() { h.waiter(ctx, clients[g%len(clients)].Mutex(name)) })
	}
	if err := h.registered(ctx, w); err != nil {
		cancel()
		gate.Unlock(bg)
		wg.Wait()
		return Result{}, err
	}
	h.mu.Lock()
	sp.begin()
	s0, st0 := h.cnt.snapshot(), storeCount(cfg)
	start := time.Now()
	h.lastRelease = start
	h.mu.Unlock()
	if err := gate.Unlock(bg); err != nil {
		sp.fail(err)
		cancel()
	}
	wg.Wait()
	if err := sp.failed(); err != nil {
		return Result{}, err
	}
	return h.result(w, s0, st0, time.Since(start)), nil
}

// registered waits until all w goroutines wait in the store.
func (h *herdRun) registered(ctx context.Context, w int) error {
	wait := time.Minute + time.Duration(w)*50*time.Millisecond
	deadline := time.Now().Add(wait)
	for h.cnt.waiting.Load() < int64(w) {
		if err := h.sp.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d waiters registered after %v", h.cnt.waiting.Load(), w, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// waiter locks m in a loop: lock, unlock, and, once a waiter has the lock,
// lock again; so every grant is a hand-off to a waiter.
func (h *herdRun) waiter(ctx context.Context, m *dlock.Mutex) {
	for {
		l, err := m.Lock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.sp.fail(err)
				h.cancel()
			}
			return
		}
		next, more := h.granted()
		uctx, ucancel := context.WithTimeout(context.Background(), time.Minute)
		err = l.Unlock(uctx)
		ucancel()
		if err != nil {
			h.sp.fail(err)
		}
		if !more || err != nil {
			h.cancel()
			return
		}
		// Wait again only once a waiter has the lock, so that every grant
		// is a hand-off to a waiter, not the releaser's own next Lock.
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
	}
}

// granted records a grant, and returns the channel closed at the next one
// and whether the run goes on. The first grant past the span takes the
// final counts.
func (h *herdRun) granted() (chan struct{}, bool) {
	got := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	more := h.sp.next()
	if more {
		h.grants++
		h.handoffs = append(h.handoffs, got.Sub(h.lastRelease))
	} else if !h.ended {
		h.ended = true
		h.end, h.endStore = h.cnt.snapshot(), storeCount(h.cfg)
	}
	close(h.turn)
	h.turn = make(chan struct{})
	h.lastRelease = time.Now()
	return h.turn, more
}

// result is the Herd figures per release: the measured grants and the
// last one's release, which the final counts include.
func (h *herdRun) result(w int, s0 snapshot, st0 int64, el time.Duration) Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Result{Workload: "herd" + strconv.Itoa(w), Ops: int64(h.grants), Elapsed: el}
	d := h.end.sub(s0)
	rel := float64(h.grants + 1)
	r.add(float64(h.grants)/el.Seconds(), "grants/s")
	r.add(float64(d.requests())/rel, "calls/release")
	r.add(float64(d.wakes)/rel, "wakes/release")
	if h.cfg.Requests != nil {
		r.add(float64(h.endStore-st0)/rel, "store-req/release")
	}
	r.latency("handoff-", h.handoffs)
	return r
}

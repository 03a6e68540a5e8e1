package sqllocktest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// herdSize is the number of waiters of the Herd test, and herdConns the
// most connections their Backend may have open once they were all served:
// a turn of the name, the listener, a renewal, a beat or sweep, and in
// session mode the holder's and the one waiting in the server.
const (
	herdSize  = 60
	herdConns = 8
)

// Herd checks that a herd — many waiters on one name in one process —
// takes a bounded number of the server's connections, in both modes, fair
// or not, and that every waiter is granted in turn: the waiters of a
// process take turns on one connection per name, and in session mode one
// of them at a time waits in the server. The pools keep the connections
// they opened (up to 32 idle), so the count after the herd shows the
// most that were open at once.
func Herd(t *testing.T, tg Target) {
	srv := tg.Start(t, false)
	db := tg.DB(t, srv.DSN)
	count := `SELECT COUNT(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`
	if tg.Dialect == "mysql" {
		count = `SELECT COUNT(*) FROM information_schema.processlist WHERE command <> 'Daemon'`
	}
	conns := func(t *testing.T) int {
		t.Helper()
		var n int
		if err := db.QueryRow(count).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, md := range modes {
		for _, fair := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fair=%v", md.name, fair), func(t *testing.T) {
				base := conns(t)
				herd(t, tg.factory(srv.DSN, md.m)(t), fair)
				if n := conns(t) - base; n > herdConns {
					t.Errorf("a herd of %d waiters on one name left %d connections open (the most at once), want at most %d", herdSize, n, herdConns)
				}
			})
		}
	}
}

// herd runs herdSize waiters on one name on a Client over b, once they all
// wait, and waits until each was granted once.
func herd(t *testing.T, b dlock.Backend, fair bool) {
	w := &waitCounter{Backend: b}
	var opts []dlock.Option
	if fair {
		opts = append(opts, dlock.Fair())
	}
	c, err := dlock.New(w, opts...)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := c.Mutex(fmt.Sprintf("herd/%d", time.Now().UnixNano()))
	first, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		granted atomic.Int64
		errs    = make(chan error, herdSize)
	)
	for range herdSize {
		wg.Go(func() {
			l, err := m.Lock(ctx)
			if err == nil {
				granted.Add(1)
				err = l.Unlock(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	dlocktest.WaitFor(t, time.Minute, func() error {
		if n := w.waiting.Load(); n < herdSize {
			return fmt.Errorf("%d of %d waiters wait", n, herdSize)
		}
		return nil
	})
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := granted.Load(); n != herdSize {
		t.Errorf("%d of %d waiters were granted", n, herdSize)
	}
}

// waitCounter counts the acquisitions of its Backend that wait.
type waitCounter struct {
	dlock.Backend
	waiting atomic.Int64
}

func (w *waitCounter) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, wt, err := w.Backend.Acquire(ctx, req)
	if wt != nil {
		w.waiting.Add(1)
	}
	return g, wt, err
}

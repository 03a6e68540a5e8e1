package dlocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

// Reclaim gives the suite a hook that makes the store reclaim, now, the
// state of every free name (released, or expired with its holder gone,
// and without waiters) — the sweep a backend would otherwise do within its
// documented bound. Backends that delete a free name's state in the release
// itself need no hook. count, if not nil, returns how many records (keys,
// rows, nodes) of dlock's the store holds for names that start with prefix,
// and lets the item check that free names leave nothing behind.
func Reclaim(reclaim func(ctx context.Context) error, count func(ctx context.Context, prefix string) (int, error)) Option {
	return optionFunc(func(c *config) { c.reclaim = &reclaimHooks{reclaim: reclaim, count: count} })
}

type reclaimHooks struct {
	reclaim func(ctx context.Context) error
	count   func(ctx context.Context, prefix string) (int, error)
}

// reclaimKeepsTokens locks and releases names again and again, forcing
// reclamation in between: every new grant of a name must get a token
// greater than the last one, whether or not the store kept the name's
// state; and, where the backend can count its records, free names leave
// none behind.
func (s *suite) reclaimKeepsTokens() {
	c := s.client(dlock.TTL(time.Minute))
	h := s.cfg.reclaim
	reclaim := func() {
		s.t.Helper()
		if h == nil || h.reclaim == nil {
			return
		}
		if err := h.reclaim(s.ctx(time.Minute)); err != nil {
			s.t.Fatalf("reclaim: %v", err)
		}
	}
	const names, rounds = 20, 3
	last := make([]uint64, names)
	for round := range rounds {
		for i := range names {
			name := s.name(fmt.Sprintf("r%d", i))
			l := s.lock(c.Mutex(name))
			if round > 0 && l.Token() <= last[i] {
				s.unlock(l)
				s.t.Fatalf("round %d, %s: token %d after %d (reclamation must not make tokens go back)", round, name, l.Token(), last[i])
			}
			last[i] = l.Token()
			s.unlock(l)
		}
		reclaim()
	}
	if h == nil || h.count == nil {
		return
	}
	// An abandoned hold expires and is reclaimed too.
	abandoned, _ := s.abandon(s.name("abandoned"))
	<-abandoned.Done()
	time.Sleep(s.cfg.ttl) // the store's own expiry, which the lease's deadline precedes
	held := s.lock(c.Mutex(s.name("held")))
	defer s.unlock(held)
	reclaim()
	n, err := h.count(s.ctx(time.Minute), s.prefix)
	if err != nil {
		s.t.Fatalf("count: %v", err)
	}
	// Only the held name may keep state.
	if n > 1 {
		s.t.Errorf("after %d names were locked and released (and one abandoned), the store keeps %d records under %q; want at most 1 (the held name's)", names+1, n, s.prefix)
	}
}

package dlocktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// ForeignKind is a kind of foreign data: what a store can hold at a lock's
// record that dlock did not write there. See [PlantForeign].
type ForeignKind int

// The kinds of foreign data the ForeignData item plants.
const (
	// ForeignGarbage is a value dlock cannot read where it keeps the
	// lock's state: a token that is not a number, a node or key whose
	// content is not dlock's, a hash with a field missing.
	ForeignGarbage ForeignKind = iota + 1
	// ForeignMaxToken is a lock record, free, whose fencing token is at
	// the top of the range the backend can store and hand out, so that
	// no later token exists.
	ForeignMaxToken
	// ForeignBadCount is a lock record that says it is held, with a
	// reentry count of zero or below (or a count without an owner).
	ForeignBadCount
)

// ForeignOwner is the owner a planted record names where it has one. The
// item also tries to acquire the lock as this owner, which must not
// re-enter the foreign record.
const ForeignOwner = "dlocktest-foreign"

var foreignKinds = []ForeignKind{ForeignGarbage, ForeignMaxToken, ForeignBadCount}

// String names the kind.
func (k ForeignKind) String() string {
	switch k {
	case ForeignGarbage:
		return "Garbage"
	case ForeignMaxToken:
		return "MaxToken"
	case ForeignBadCount:
		return "BadCount"
	}
	return "ForeignKind(?)"
}

// foreignHooks are the hooks of PlantForeign.
type foreignHooks struct {
	plant func(ctx context.Context, name string, kind ForeignKind) error
	dump  func(ctx context.Context, name string) (string, error)
}

// PlantForeign gives the ForeignData item the means to plant foreign data
// in the store under test. Without it the item is skipped.
//
// plant writes foreign data of kind at the record(s) the backend keeps for
// the lock name (as the backend gets it in [dlock.Request].Name), in place
// of whatever is there. For a kind the store cannot hold (etcd and
// ZooKeeper assign tokens themselves) it returns an error matching
// [errors.ErrUnsupported], and the item skips that kind.
//
// dump returns the raw content of every record the backend keeps for
// name, in a form that changes whenever any of them changes, so that the
// item can check that nothing was written.
func PlantForeign(plant func(ctx context.Context, name string, kind ForeignKind) error, dump func(ctx context.Context, name string) (string, error)) Option {
	return optionFunc(func(c *config) { c.foreign = &foreignHooks{plant: plant, dump: dump} })
}

// foreignData plants each kind of foreign data at a name and checks that
// TryLock and Lock (plain and fair) on it fail with an error matching
// ErrForeignData that names the lock, that nothing was written, that
// Inspect lists the record marked bad beside a good one, and that other
// names still work.
func (s *suite) foreignData() {
	h := s.cfg.foreign
	if h == nil {
		s.t.Skip("the backend's test gives no dlocktest.PlantForeign hook: foreign data is not checked")
	}
	for _, kind := range foreignKinds {
		s.t.Run(kind.String(), func(t *testing.T) {
			sub := *s
			sub.t, sub.prefix = t, s.prefix+kind.String()+"/"
			sub.foreignKind(h, kind)
		})
	}
}

func (s *suite) foreignKind(h *foreignHooks, kind ForeignKind) {
	t := s.t
	ctx := s.ctx(time.Minute)
	c := s.client()
	good := s.lock(c.Mutex(s.name("good")))
	name := s.name("foreign")
	if err := h.plant(ctx, name, kind); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the store cannot hold foreign data of kind %v: %v", kind, err)
	} else if err != nil {
		t.Fatalf("planting %v at %q: %v", kind, name, err)
	}
	before, err := h.dump(ctx, name)
	if err != nil {
		t.Fatalf("dump %q: %v", name, err)
	}
	check := func(op string, l *dlock.Lease, err error) {
		t.Helper()
		if l != nil {
			t.Errorf("%s on foreign data %s was granted, token %d", op, before, l.Token())
			l.Unlock(s.ctx(time.Minute))
			return
		}
		switch {
		case !errors.Is(err, dlock.ErrForeignData):
			t.Errorf("%s on foreign data %s: %v, want an error matching ErrForeignData", op, before, err)
		case errors.Is(err, dlock.ErrNotAcquired):
			t.Errorf("%s on foreign data: %v also matches ErrNotAcquired: a Lock would wait for nothing", op, err)
		case !strings.Contains(err.Error(), name):
			t.Errorf("%s on foreign data: %q does not name the lock %q", op, err, name)
		}
	}
	l, err := c.Mutex(name).TryLock(ctx)
	check("TryLock", l, err)
	// A Lock ends at once: the foreign data will not go away by waiting.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	l, err = c.Mutex(name).Lock(lctx)
	check("Lock", l, err)
	l, err = c.Mutex(name, dlock.Fair()).Lock(lctx)
	check("fair Lock", l, err)
	l, err = c.Mutex(name, dlock.Owner(ForeignOwner)).TryLock(lctx)
	check("TryLock with an explicit owner", l, err)
	cancel()

	after, err := h.dump(ctx, name)
	if err != nil {
		t.Fatalf("dump %q: %v", name, err)
	}
	if after != before {
		t.Errorf("the attempts on foreign data changed it:\nbefore %s\nafter  %s", before, after)
	}

	s.inspectForeign(ctx, c, good, name, before)

	other, err := c.Mutex(s.name("other")).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of another name beside foreign data: %v", err)
	}
	s.unlock(other)
	s.unlock(good)
}

// inspectForeign checks that Inspect lists the foreign record at name
// (dumped as before) marked bad, beside the good lease's lock unmarked.
func (s *suite) inspectForeign(ctx context.Context, c *dlock.Client, good *dlock.Lease, name, before string) {
	t := s.t
	t.Helper()
	infos, err := c.Inspect(ctx, s.prefix)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		t.Log("the backend has no Inspect: listing not checked")
	case err != nil:
		t.Errorf("Inspect with foreign data at %q: %v", name, err)
	default:
		var sawBad, sawGood bool
		for _, in := range infos {
			switch in.Name {
			case name:
				sawBad = true
				if in.Bad == "" {
					t.Errorf("Inspect lists the foreign record %s without marking it bad: %+v", before, in)
				}
			case good.Name():
				sawGood = true
				if in.Bad != "" || in.Owner != good.Owner() || in.Token != good.Token() {
					t.Errorf("Inspect lists the good lock as %+v, want owner %q token %d, not bad", in, good.Owner(), good.Token())
				}
			}
		}
		if !sawBad {
			t.Errorf("Inspect does not list the foreign record %s: %+v", before, infos)
		}
		if !sawGood {
			t.Errorf("Inspect does not list the held lock %q beside the foreign record: %+v", good.Name(), infos)
		}
	}
}

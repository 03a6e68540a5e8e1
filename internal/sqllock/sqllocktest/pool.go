package sqllocktest

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// PoolOpener opens a backend the way dlock.Open does, from its URL with
// the query params ("" for none) appended, and returns its SQL shell.
type PoolOpener func(params string) (*sqllock.Backend, error)

// PoolSizes tests the pool that a server backend's Open makes: by default
// [sqllock.DefaultPoolMaxConns] connections kept open between statements
// (and at most that many, plus extra that the backend keeps out of the
// pool for itself, in lease-table mode), pool_max_conns=N sets N, session
// mode caps nothing, and a bad value is ErrInvalidOption naming the
// parameter.
func PoolSizes(t *testing.T, open PoolOpener, extra int) {
	for _, c := range []struct {
		params  string
		size    int
		session bool
	}{
		{"", sqllock.DefaultPoolMaxConns, false},
		{"pool_max_conns=5", 5, false},
		{"pool_max_conns=5&mode=session", 5, true},
	} {
		t.Run("params="+c.params, func(t *testing.T) {
			b, err := open(c.params)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			checkPool(t, b, c.size, extra, c.session)
		})
	}
	for _, bad := range []string{"pool_max_conns=0", "pool_max_conns=-1", "pool_max_conns=many",
		"pool_max_conns=4&pool_max_conns=5"} {
		b, err := open(bad)
		if err == nil {
			b.Close()
			t.Errorf("%s: opened, want ErrInvalidOption", bad)
			continue
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("%s: %v, want ErrInvalidOption naming pool_max_conns", bad, err)
		}
	}
}

// checkPool checks that b's pool keeps size connections idle once they
// were all in use at once, and caps the open ones at size+extra unless in
// session mode.
func checkPool(t *testing.T, b *sqllock.Backend, size, extra int, session bool) {
	t.Helper()
	db := sqllock.PoolOf(b)
	wantMax := size + extra
	if session {
		wantMax = 0 // no limit
	}
	if got := db.Stats().MaxOpenConnections; got != wantMax {
		t.Errorf("MaxOpenConnections %d, want %d", got, wantMax)
	}
	// Hold size connections at once, then give them back: all stay open.
	before := db.Stats().MaxIdleClosed
	var held []interface{ Close() error }
	for range size {
		c, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Close()
	}
	st := db.Stats()
	if st.Idle != size || st.MaxIdleClosed != before {
		t.Errorf("after %d connections in use at once: %d idle, %d closed for want of idle room; want %d idle, none closed",
			size, st.Idle, st.MaxIdleClosed-before, size)
	}
}

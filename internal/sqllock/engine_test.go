package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noReturning is SQLite spoken as if it had no RETURNING, as MySQL must be:
// it runs the engine's transactional paths.
var noReturning = func() sqllock.Dialect {
	d := sqllock.SQLite
	d.Name = "sqlite-noreturning"
	d.Returning = false
	return d
}()

func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(8)
	return db
}

// factory makes each backend on its own *sql.DB with its own Local, as
// separate processes would have: only the data_version feed wakes them.
func factory(path string, d sqllock.Dialect, cfg sqllock.Config) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		db := openDB(t, path)
		c := cfg
		c.Feed = sqllock.NewPollFeed(db.Conn, "PRAGMA data_version", 5*time.Millisecond, 25*time.Millisecond)
		c.OnClose = db.Close
		e, err := sqllock.New(context.Background(), db, d, c)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return e
	}
}

func TestConformance(t *testing.T) {
	for _, d := range []sqllock.Dialect{sqllock.SQLite, noReturning} {
		t.Run(d.Name, func(t *testing.T) {
			var opts []dlocktest.Option
			if !d.Returning {
				// Each attempt is a transaction of unprepared statements
				// here: slow under the race detector, and the logic is
				// the same at a quarter of the grants.
				opts = append(opts, dlocktest.Grants(50))
			}
			path := filepath.Join(t.TempDir(), "locks.db")
			table := "t_" + time.Now().Format("150405")
			db := openDB(t, path)
			t.Cleanup(func() { db.Close() })
			opts = append(opts, sqllocktest.Foreign(db, "sqlite", table))
			// The reclaim hook sweeps through an engine of its own.
			r := factory(path, d, sqllock.Config{Table: table})(t).(*sqllock.Engine)
			t.Cleanup(func() { r.Close() })
			cdb := openDB(t, path)
			t.Cleanup(func() { cdb.Close() })
			opts = append(opts, sqllocktest.Reclaim(cdb, table, r.Reclaim))
			dlocktest.Run(t, factory(path, d, sqllock.Config{Table: table}), opts...)
		})
	}
}

// TestNoFeed runs the suite with neither a feed nor shared in-process
// state: waiters fall back to looking at the state at a backing-off
// interval.
func TestNoFeed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	path := filepath.Join(t.TempDir(), "locks.db")
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		db := openDB(t, path)
		e, err := sqllock.New(context.Background(), db, sqllock.SQLite, sqllock.Config{OnClose: db.Close})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return e
	}, dlocktest.Grants(50))
}

func TestCheckTable(t *testing.T) {
	for _, ok := range []string{"dlock_locks", "_x", "A1", "a23456789012345678901234567890123456789012345678"} {
		if err := sqllock.CheckTable(ok); err != nil {
			t.Errorf("CheckTable(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-b", "a b", "a;drop", `a"`, "é", "a.b", "a234567890123456789012345678901234567890123456789"} {
		if err := sqllock.CheckTable(bad); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("CheckTable(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

func TestMigrateForeignTable(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "x.db"))
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE mine (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	err := sqllock.Migrate(context.Background(), db, sqllock.SQLite, "mine")
	if err == nil {
		t.Fatal("Migrate over a foreign table succeeded")
	}
	t.Log(err)
	// Twice is fine.
	for range 2 {
		if err := sqllock.Migrate(context.Background(), db, sqllock.SQLite, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// newEngine returns an engine on path with its own connection pool and
// in-process state, as another process would have, closed at clean-up.
func newEngine(t *testing.T, path string, cfg sqllock.Config) *sqllock.Engine {
	t.Helper()
	e := factory(path, sqllock.SQLite, cfg)(t).(*sqllock.Engine)
	t.Cleanup(func() { e.Close() })
	return e
}

func req(name, owner string, fair, wait bool) dlock.Request {
	return dlock.Request{Name: name, Owner: owner, TTL: time.Minute, Fair: fair, Wait: wait}
}

// TestDeadFairWaiter checks that a fair waiter whose process died (it
// neither waits nor cancels any more) holds up the waiter behind it only
// until its queue entry times out.
func TestDeadFairWaiter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	const wt = 400 * time.Millisecond
	holder, dead, live := newEngine(t, path, sqllock.Config{WaiterTimeout: wt}),
		newEngine(t, path, sqllock.Config{WaiterTimeout: wt}), newEngine(t, path, sqllock.Config{WaiterTimeout: wt})
	g, _, err := holder.Acquire(ctx, req("x", "holder", true, true))
	if err != nil {
		t.Fatal(err)
	}
	if _, w, err := dead.Acquire(ctx, req("x", "dead", true, true)); w == nil || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dead waiter: %v, %v", w, err)
	}
	dead.Close() // the process dies: its queue entry stays until it times out
	_, w, err := live.Acquire(ctx, req("x", "live", true, true))
	if w == nil || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("live waiter: %v, %v", w, err)
	}
	if infos, err := holder.Inspect(ctx, "x"); err != nil || len(infos) != 1 || infos[0].Queued != 2 {
		t.Fatalf("Inspect = %+v, %v; want x with 2 fair waiters queued", infos, err)
	}
	start := time.Now()
	if err := holder.Release(ctx, dlock.Hold{Name: "x", Owner: "holder", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lg dlock.Grant
	for {
		if err := w.Wait(wctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		lg, err = w.Acquire(wctx)
		if err == nil {
			break
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("Acquire: %v", err)
		}
	}
	el := time.Since(start)
	t.Logf("granted %v after the release, token %d", el, lg.Token)
	if el > wt+2*time.Second {
		t.Errorf("the dead waiter held up the live one for %v; its timeout is %v", el, wt)
	}
	if lg.Token <= g.Token {
		t.Errorf("token %d after %d", lg.Token, g.Token)
	}
}

func TestRenewBatch(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, filepath.Join(t.TempDir(), "locks.db"), sqllock.Config{})
	var holds []dlock.Hold
	for _, name := range []string{"a", "b", "c"} {
		g, _, err := e.Acquire(ctx, dlock.Request{Name: name, Owner: "o", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, dlock.Hold{Name: name, Owner: "o", Token: g.Token})
	}
	if err := e.Release(ctx, holds[1]); err != nil {
		t.Fatal(err)
	}
	stale := dlock.Hold{Name: "c", Owner: "o", Token: holds[2].Token + 7}
	errs := e.RenewBatch(ctx, []dlock.Renewal{{Hold: holds[0], TTL: time.Hour}, {Hold: holds[1], TTL: time.Hour}, {Hold: holds[2], TTL: time.Hour}, {Hold: stale, TTL: time.Hour}})
	if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], dlock.ErrLeaseLost) || errs[2] != nil || !errors.Is(errs[3], dlock.ErrLeaseLost) {
		t.Fatalf("RenewBatch = %v; want nil, lost, nil, lost", errs)
	}
	infos, err := e.Inspect(ctx, "")
	if err != nil || len(infos) != 2 {
		t.Fatalf("Inspect = %+v, %v", infos, err)
	}
	for _, in := range infos {
		if in.TTL < 50*time.Minute {
			t.Errorf("%s: TTL %v after a renewal to an hour", in.Name, in.TTL)
		}
	}
}

// TestRenewBatchMany: a batch larger than one renewal statement, with two
// TTLs and a lost hold among them, renews every other hold to its own TTL
// and reports the lost one.
func TestRenewBatchMany(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, filepath.Join(t.TempDir(), "locks.db"), sqllock.Config{})
	const n, lostAt = 600, 300
	var rs []dlock.Renewal
	for i := range n {
		name := fmt.Sprintf("n%03d", i)
		g, _, err := e.Acquire(ctx, dlock.Request{Name: name, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ttl := time.Hour
		if i%2 == 1 {
			ttl = 2 * time.Hour
		}
		rs = append(rs, dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: "o", Token: g.Token}, TTL: ttl})
	}
	if err := e.Release(ctx, rs[lostAt].Hold); err != nil {
		t.Fatal(err)
	}
	errs := e.RenewBatch(ctx, rs)
	for i, err := range errs {
		if (i == lostAt) != errors.Is(err, dlock.ErrLeaseLost) || i != lostAt && err != nil {
			t.Errorf("renewal %d: %v", i, err)
		}
	}
	infos, err := e.Inspect(ctx, "n")
	if err != nil || len(infos) != n-1 {
		t.Fatalf("Inspect: %d locks, %v; want %d", len(infos), err, n-1)
	}
	for _, in := range infos {
		var i int
		fmt.Sscanf(in.Name, "n%d", &i)
		if want := rs[i].TTL; in.TTL < want-10*time.Minute || in.TTL > want {
			t.Errorf("%s: TTL %v after a renewal to %v", in.Name, in.TTL, want)
		}
	}
}

func TestInspectPrefix(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, filepath.Join(t.TempDir(), "locks.db"), sqllock.Config{})
	names := []string{"a", "ab", "ab/c", "ab\x7f", "ab\u00e9", "ac", "b", "ab/free"}
	for _, n := range names {
		if _, _, err := e.Acquire(ctx, dlock.Request{Name: n, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Release(ctx, dlock.Hold{Name: "ab/free", Owner: "o", Token: 1}); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"":    {"a", "ab", "ab/c", "ab\x7f", "ab\u00e9", "ac", "b"},
		"ab":  {"ab", "ab/c", "ab\x7f", "ab\u00e9"},
		"ab/": {"ab/c"},
		"b":   {"b"},
		"c":   nil,
	} {
		infos, err := e.Inspect(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range infos {
			got = append(got, in.Name)
			if in.Owner != "o" || in.Count != 1 || in.Token != 1 || in.TTL <= 0 || in.Waiters != -1 || in.Queued != 0 {
				t.Errorf("Inspect(%q): %+v", prefix, in)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Inspect(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestHeldError checks what a refused attempt says about the holder.
func TestHeldError(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, filepath.Join(t.TempDir(), "locks.db"), sqllock.Config{})
	g, _, err := e.Acquire(ctx, dlock.Request{Name: "x", Owner: "first", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := e.Acquire(ctx, dlock.Request{Name: "x", Owner: "second", TTL: time.Second})
	var held *dlock.HeldError
	if w != nil || !errors.As(err, &held) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held lock = %v, %v; want a *HeldError and no waiter", w, err)
	}
	if h := held.Holder; h.Owner != "first" || h.Token != g.Token || h.TTL <= 9*time.Second || h.TTL > 10*time.Second {
		t.Errorf("holder %+v, want first with token %d and about 10s left", h, g.Token)
	}
}

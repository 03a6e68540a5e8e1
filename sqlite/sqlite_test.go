package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/sqlite"
	"go.uber.org/goleak"
)

// childEnv, when set, makes this test binary a worker process of
// TestProcesses; its value says what to do.
const childEnv = "DLOCK_SQLITE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		m.Run() // a worker process: TestChild does the work
		return
	}
	goleak.VerifyTestMain(m)
}

// openFactory opens a Backend per call on one file, as separate processes
// (or separate parts of one program) would.
func openFactory(path string, opts ...sqlite.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := sqlite.Open(context.Background(), path, opts...)
		if err != nil {
			t.Fatalf("Open(%q): %v", path, err)
		}
		return b
	}
}

// variantGrants is the exclusion item's grants per goroutine in the
// suite's runs over other ways to open the Backend: those runs are about
// the wiring, and TestConformance makes the suite's full 200.
const variantGrants = 50

func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	dlocktest.Run(t, openFactory(path), foreign(t, path, sqllock.DefaultTable), reclaim(t, path, sqllock.DefaultTable))
}

// reclaim is the suite's hook to force a sweep of the lease table table
// (through a Backend of its own) and count its rows.
func reclaim(t *testing.T, path, table string) dlocktest.Option {
	b, err := sqlite.Open(context.Background(), path, sqlite.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Reclaim(db, table, b.Reclaim)
}

// foreign is the suite's hook to plant foreign data in the lease table
// table of the database file at path, through a *sql.DB of its own.
func foreign(t *testing.T, path, table string) dlocktest.Option {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Foreign(db, "sqlite", table)
}

// TestConformanceCrossProcessWake gives every Backend in-process state of
// its own, so that only the PRAGMA data_version poll wakes a waiter on
// another Backend's release, as it must between processes.
func TestConformanceCrossProcessWake(t *testing.T) {
	dlocktest.Run(t, openFactory(filepath.Join(t.TempDir(), "locks.db"), sqlite.PrivateLocal()))
}

// TestConformanceSharedDB runs the suite on Backends made by New over one
// *sql.DB of the caller's, which must stay open after the Backends close.
func TestConformanceSharedDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(8)
	t.Cleanup(func() { db.Close() })
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		b, err := sqlite.New(db, sqlite.Table("shared_db_locks"))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return b
	}, foreign(t, path, "shared_db_locks"), dlocktest.Grants(variantGrants))
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's DB after the Backends closed: %v", err)
	}
	// The tables were made through the caller's DB: the fence table has
	// its one row. (Released names leave no lease row.)
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM shared_db_locks_fence`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("fence table through the caller's DB: %d rows, %v", n, err)
	}
}

// TestConformanceInMemory runs the suite on Backends made by New over one
// in-memory database in a pool of one connection: there is no other
// process to hear from, and nothing may need a second connection while it
// holds one.
func TestConformanceInMemory(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		b, err := sqlite.New(db)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if !strings.Contains(b.String(), "in-memory") {
			t.Errorf("String() = %q", b.String())
		}
		return b
	}, dlocktest.Grants(variantGrants))
}

func BenchmarkSQLite(b *testing.B) {
	dlocktest.Bench(b, openFactory(filepath.Join(b.TempDir(), "bench.db")))
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	fds := openFDs(t)

	missing := filepath.Join(dir, "no", "such", "dir", "locks.db")
	_, err := sqlite.Open(context.Background(), missing)
	t.Logf("missing directory: %v", err)
	if err == nil || !errors.Is(err, dlock.ErrBackendUnavailable) || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open in a missing directory: %v; want an error naming the path, matching ErrBackendUnavailable and fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open in a missing directory created something: %v", err)
	}

	// An unwritable place: a read-only directory, or for root (whom
	// permissions do not stop) sysfs.
	unwritable := filepath.Join(dir, "ro", "locks.db")
	if os.Geteuid() == 0 {
		unwritable = "/sys/dlock-sqlite-test.db"
	} else {
		if err := os.Mkdir(filepath.Dir(unwritable), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	b, err := sqlite.Open(context.Background(), unwritable)
	t.Logf("unwritable: %v", err)
	if err == nil {
		b.Close()
		t.Skipf("%s is writable here", unwritable)
	}
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), unwritable) {
		t.Errorf("Open of an unwritable path: %v; want an error naming the path, matching ErrBackendUnavailable", err)
	}

	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o644)
	if _, err := sqlite.Open(context.Background(), filepath.Join(notDir, "locks.db")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Open under a regular file: %v", err)
	}

	notDB := filepath.Join(dir, "garbage.db")
	os.WriteFile(notDB, []byte(strings.Repeat("this is not a database\n", 200)), 0o644)
	if _, err := sqlite.Open(context.Background(), notDB); err == nil || !strings.Contains(err.Error(), notDB) || !errors.Is(err, dlock.ErrBackendUnavailable) {
		t.Errorf("Open of a file that is not a database: %v", err)
	} else {
		t.Logf("not a database: %v", err)
	}

	for _, bad := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		if _, err := sqlite.Open(context.Background(), bad); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
	if _, err := sqlite.Open(context.Background(), filepath.Join(dir, "x.db"), sqlite.Table("bad-name")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Open with a bad table name: %v, want ErrInvalidOption", err)
	}
	if after := openFDs(t); after > fds {
		t.Errorf("%d file descriptors open after the failed Opens, %d before", after, fds)
	}
}

// openFDs counts the process's open file descriptors (-1 where that
// cannot be known).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func TestNewOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlite.New(db, sqlite.BusyTimeout(time.Second)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with an Open-only option: %v, want ErrInvalidOption", err)
	}
	if _, err := sqlite.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	b, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sqlite " + path; b.String() != want {
		t.Errorf("String() = %q, want %q", b.String(), want)
	}
	b.Close()
	if err := db.Ping(); err != nil {
		t.Errorf("Close closed the caller's DB: %v", err)
	}
	if err := sqlite.Migrate(context.Background(), db, sqlite.Table("migrated")); err != nil {
		t.Errorf("Migrate: %v", err)
	}
	if _, err := db.Exec(`SELECT name, owner, holds, token, expires_at FROM migrated`); err != nil {
		t.Errorf("the migrated table: %v", err)
	}
}

func TestURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	abs := filepath.Join(dir, "abs.db")
	c, err := dlock.Open(ctx, "sqlite://"+abs+"?table=url_locks&busy_timeout=2s&waiter_timeout=3s&synchronous=normal")
	if err != nil {
		t.Fatalf("dlock.Open: %v", err)
	}
	if got, want := c.String(), "sqlite "+abs; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	l, err := c.Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	infos, err := c.Inspect(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Name != "job" || infos[0].Token != l.Token() {
		t.Errorf("Inspect = %+v, %v; want job with token %d", infos, err, l.Token())
	}
	if b, ok := c.Backend().(*sqlite.Backend); !ok || b.Table() != "url_locks" {
		t.Errorf("backend %T with table %v, want *sqlite.Backend with url_locks", c.Backend(), c.Backend())
	}
	l.Unlock(ctx)
	c.Close()

	t.Chdir(dir)
	for _, u := range []string{"sqlite:rel.db", "sqlite://./rel2.db", "sqlite:sub%20dir.db"} {
		c, err := dlock.Open(ctx, u)
		if err != nil {
			t.Errorf("dlock.Open(%q): %v", u, err)
			continue
		}
		if !strings.HasPrefix(c.String(), "sqlite "+dir) {
			t.Errorf("dlock.Open(%q).String() = %q, want a path in %s", u, c.String(), dir)
		}
		c.Close()
	}
	for _, name := range []string{"rel.db", "rel2.db", "sub dir.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("relative URL did not create %s: %v", name, err)
		}
	}

	for _, u := range []string{
		"sqlite://example.com/x.db",
		"sqlite:///" + abs + "?tabel=x",
		"sqlite:///" + abs + "?table=bad-name",
		"sqlite:///" + abs + "?busy_timeout=soon",
		"sqlite:///" + abs + "?synchronous=off",
		"sqlite://",
		"sqlite:",
		"sqlite://user:secret@/x.db",
	} {
		c, err := dlock.Open(ctx, u)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("dlock.Open(%q): %v, want ErrInvalidOption", u, err)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("dlock.Open(%q) error shows the password: %v", u, err)
		}
	}
	if _, err := dlock.Open(ctx, "sqlite://"+filepath.Join(dir, "missing", "x.db")); !errors.Is(err, dlock.ErrBackendUnavailable) {
		t.Errorf("dlock.Open in a missing directory: %v, want ErrBackendUnavailable", err)
	}
}

// TestTables checks that two lease tables in one file are separate lock
// spaces.
func TestTables(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	var cs []*dlock.Client
	for _, table := range []string{"a_locks", "b_locks"} {
		b, err := sqlite.Open(context.Background(), path, sqlite.Table(table))
		if err != nil {
			t.Fatal(err)
		}
		c, err := dlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	la, err := cs[0].Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := cs[1].Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of the same name in another table: %v", err)
	}
	la.Unlock(ctx)
	lb.Unlock(ctx)
}

// TestProcesses runs worker processes (this test binary, re-executed) that
// contend for one lock in one database file and increment a counter kept
// in a plain file under it. Any overlap of two holders loses an increment;
// the workers also check that the fencing tokens they see only increase.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const procs, iters = 4, 150
	for _, mode := range []string{"default", "fair"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			db, counter := filepath.Join(dir, "locks.db"), filepath.Join(dir, "counter")
			if err := os.WriteFile(counter, []byte("0 0"), 0o644); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range procs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := child(t, fmt.Sprintf("count %s %s %s %d", mode, db, counter, iters)).CombinedOutput()
					if err != nil {
						t.Errorf("worker %d: %v\n%s", i, err, out)
					}
				}()
			}
			wg.Wait()
			n, _ := readCounter(t, counter)
			if n != procs*iters {
				t.Errorf("counter = %d after %d processes × %d increments: holders overlapped", n, procs, iters)
			}
		})
	}
}

// TestProcessKilled checks that a lock held by a process that is killed
// is granted to a waiter in another process once its TTL runs out, with a
// greater token.
func TestProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	path := filepath.Join(t.TempDir(), "locks.db")
	cmd := child(t, "hold "+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("worker: %v", err)
	}
	var token uint64
	if _, err := fmt.Sscanf(line, "locked %d", &token); err != nil {
		t.Fatalf("worker said %q", line)
	}
	cmd.Process.Kill()
	cmd.Wait()

	b, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	t.Logf("granted %v after the kill, token %d after %d", time.Since(start), l.Token(), token)
	if l.Token() <= token {
		t.Errorf("token %d is not above the killed holder's %d", l.Token(), token)
	}
	l.Unlock(ctx)
}

// child returns the command that runs this test binary as a worker.
func child(t *testing.T, job string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"="+job)
	return cmd
}

func readCounter(t testing.TB, path string) (n int, token uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(b), "%d %d", &n, &token); err != nil {
		t.Fatalf("counter file %q: %v", b, err)
	}
	return n, token
}

// TestChild is the worker of TestProcesses and TestProcessKilled; it is
// skipped unless the test binary was started as a worker.
func TestChild(t *testing.T) {
	job := strings.Fields(os.Getenv(childEnv))
	if len(job) == 0 {
		t.Skip("only run as a worker process")
	}
	ctx := context.Background()
	switch job[0] {
	case "count": // count MODE DB COUNTER ITERS
		var opts []dlock.Option
		if job[1] == "fair" {
			opts = append(opts, dlock.Fair())
		}
		iters, _ := strconv.Atoi(job[4])
		b, err := sqlite.Open(context.Background(), job[2])
		if err != nil {
			t.Fatal(err)
		}
		c, err := dlock.New(b, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m := c.Mutex("counter", dlock.TTL(10*time.Second))
		for range iters {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n, last := readCounter(t, job[3])
			if l.Token() <= last {
				t.Errorf("token %d granted after token %d", l.Token(), last)
			}
			time.Sleep(50 * time.Microsecond) // widen the window for a lost update
			if err := os.WriteFile(job[3], fmt.Appendf(nil, "%d %d", n+1, l.Token()), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	case "hold": // hold DB: take the lock and wait to be killed
		b, err := sqlite.Open(context.Background(), job[1])
		if err != nil {
			t.Fatal(err)
		}
		c, err := dlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Mutex("held", dlock.TTL(500*time.Millisecond)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("locked %d\n", l.Token())
		time.Sleep(time.Minute)
	default:
		t.Fatalf("unknown job %q", job)
	}
}

// TestTokensSurviveReopen checks that a lock's token goes on from where it
// was after the file is closed and opened again: the row is kept.
func TestTokensSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	var last uint64
	for i := range 3 {
		c, err := dlock.Open(ctx, "sqlite://"+path)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Errorf("open %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		l.Unlock(ctx)
		c.Close()
	}
}

// TestConcurrentFirstOpen opens a new file from several Backends at once,
// each with its own connections, as processes starting together would:
// creating the tables and switching to WAL mode must not fail any of them.
func TestConcurrentFirstOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	var wg sync.WaitGroup
	bs := make([]*sqlite.Backend, 8)
	for i := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := sqlite.Open(context.Background(), path, sqlite.PrivateLocal(), sqlite.Table("first_open"))
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			bs[i] = b
		}()
	}
	wg.Wait()
	for _, b := range bs {
		if b != nil {
			b.Close()
		}
	}
}

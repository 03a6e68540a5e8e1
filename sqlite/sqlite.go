package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Backend is a dlock backend on an SQLite database file. It is safe for
// concurrent use; see the package doc for what it guarantees. Its methods
// are those of the SQL backends' shell: [dlock.Backend],
// [dlock.BatchRenewer], [dlock.Inspector] and [dlock.Migrator], plus
// String, Table and Reclaim (a sweep of free rows on demand). SQLite has
// no session mode: Session reports false and loss is never reported.
type Backend struct {
	*shell
	file *fileID // the database file; nil for an in-memory database
}

type shell = sqllock.Backend

// The in-process poll of PRAGMA data_version: soon after a change, backing
// off while nothing changes. See the package doc.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 25 * time.Millisecond
)

// minVersion is the oldest SQLite with everything the engine uses
// (RETURNING: 3.35.0).
const minVersion = 3_035_000

// Open opens (creating it if needed) the SQLite database file at path and
// returns a Backend on it, with the tables created. ctx bounds it; getting
// the file into use is bounded by the connect timeout too. The directory
// must exist and the file be writable; otherwise the error names the path
// and matches [dlock.ErrBackendUnavailable], and nothing is left open.
// path is a file name, not a URI; ":memory:" is refused (use package mem
// for in-process locks). Close closes the database.
func Open(ctx context.Context, path string, opts ...Option) (*Backend, error) {
	cfg, err := resolve(true, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case path == "":
		return nil, invalid("empty database path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, invalid("%q: give a file path (for in-process locks use package mem)", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, openError(path, "", err)
	}
	dir := filepath.Dir(abs)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, openError(abs, fmt.Sprintf("directory %s does not exist", dir), fs.ErrNotExist)
	case err != nil:
		return nil, openError(abs, "", err)
	case !fi.IsDir():
		return nil, openError(abs, fmt.Sprintf("%s is not a directory", dir), nil)
	}
	// Create or open the file ourselves first: the operating system's
	// error ("permission denied", "read-only file system", "is a
	// directory") says more than SQLite's "unable to open database file".
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, openError(abs, "cannot create or write the file", err)
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, openError(abs, "", err)
	}
	key := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		key = real
	}

	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+cfg.synchronous+")")
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, openError(abs, "", err)
	}
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	wctx, cancel := connect.Bound(ctx, cfg.ConnectTimeout(0))
	err = setWAL(wctx, db)
	if err != nil && wctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, context.Cause(wctx))
	}
	cancel()
	if err != nil {
		db.Close()
		return nil, openError(abs, "cannot use the file as a database", err)
	}
	feedDB := func() *sql.DB {
		fdb, _ := sql.Open("sqlite", dsn) // sql.Open of a registered driver does not fail
		return fdb
	}
	return newBackend(ctx, db, key, "sqlite "+abs, cfg, feedDB, db.Close, &fileID{path: abs, fi: fi})
}

// setWAL switches the database to WAL mode (a setting kept in the file),
// waiting out other processes that do the same.
func setWAL(ctx context.Context, db *sql.DB) error {
	backoff := time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil {
			return nil // a filesystem without shared memory keeps its mode: still correct, slower
		}
		if sqllock.SQLite.Classify(err) != sqllock.Retry || ctx.Err() != nil {
			return err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

// New returns a Backend on db, an SQLite database the caller opened
// (SQLite 3.35 or later), creating the tables if needed. Close does not
// close db. The options BusyTimeout and Synchronous apply to Open only:
// set them on db's connections (see the package doc). Waiters read the
// lock state concurrently: a pool that keeps too few idle connections
// (database/sql keeps 2 unless told otherwise) reopens connections all the
// time under contention; SetMaxIdleConns(8) or so avoids that. For waking
// waiters on changes by other processes, New opens one more connection to
// the same file (through db's driver, outside db's pool) while there are
// waiters. Checking the database and creating the tables is bounded by
// 30 s.
func New(db *sql.DB, opts ...Option) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sqllock.SetupTimeout)
	defer cancel()
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	cfg, err := resolve(false, opts)
	if err != nil {
		return nil, err
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err != nil {
		return nil, errors.Join(dlock.ErrBackendUnavailable, fmt.Errorf("sqlite: reading sqlite_version(): %w", err))
	}
	if v := parseVersion(version); v < minVersion {
		return nil, invalid("SQLite %s is older than 3.35.0 (RETURNING is needed)", version)
	}
	file, err := mainFile(ctx, db)
	if err != nil {
		return nil, errors.Join(dlock.ErrBackendUnavailable, fmt.Errorf("sqlite: PRAGMA database_list: %w", err))
	}
	if file == "" {
		// An in-memory or temporary database lives in db's connections:
		// only the Backends on db can share it, and no other process.
		return newBackend(ctx, db, fmt.Sprintf("%p", db), "sqlite (in-memory or temporary database)", cfg, nil, nil, nil)
	}
	// The feed's connection is outside the caller's pool, which may be as
	// small as one connection.
	feedDB := func() *sql.DB {
		return sql.OpenDB(fileConnector(db.Driver(), "file:"+(&url.URL{Path: file}).EscapedPath()))
	}
	key := file
	if real, err := filepath.EvalSymlinks(file); err == nil {
		key = real
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, errors.Join(dlock.ErrBackendUnavailable, fmt.Errorf("sqlite: %w", err))
	}
	return newBackend(ctx, db, key, "sqlite "+file, cfg, feedDB, nil, &fileID{path: file, fi: fi})
}

// newBackend makes the engine. key identifies the store (the file) in this
// process: the Backends of the process on one file and table share its
// in-process state and its data_version poll, on a connection that
// feedDB opens (nil: no poll, for an in-memory database). file is the
// database file as opened (nil: none).
func newBackend(ctx context.Context, db *sql.DB, key, desc string, cfg config, feedDB func() *sql.DB, onClose func() error, file *fileID) (*Backend, error) {
	var (
		local   *sqllock.Local
		release func() error
	)
	switch {
	case cfg.privateLocal:
		local, release = newStore(feedDB)
	default:
		local, release = sharedStore(key+"\x00"+cfg.Table, feedDB)
	}
	sb, err := sqllock.Start(ctx, cfg.Options, sqllock.Setup{
		DB: db, Dialect: dialect, Desc: desc, Local: local,
		OnClose: func() error {
			err := release()
			if onClose != nil {
				err = errors.Join(err, onClose())
			}
			return err
		},
	})
	if err != nil {
		return nil, err // Start called OnClose
	}
	return &Backend{shell: sb, file: file}, nil
}

// Migrate creates the lease table, the waiters table, the fence table
// and the triggers in db if they do not exist, and adds missing fence
// rows (the Table option names them), as Open and New do on first
// use; it is safe to run from several processes at once. `dlock migrate`
// uses it to create them ahead of time.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	cfg, err := resolve(false, opts)
	if err != nil {
		return err
	}
	return sqllock.Migrate(ctx, db, dialect, cfg.Table)
}

// ---------------------------------------------------------------------

// newStore returns in-process state for one store, with a data_version
// poll on a connection from feedDB (nil: none), and its release.
func newStore(feedDB func() *sql.DB) (*sqllock.Local, func() error) {
	if feedDB == nil {
		local := sqllock.NewLocal(nil)
		return local, local.Close
	}
	fdb := feedDB()
	fdb.SetMaxOpenConns(1)
	local := sqllock.NewLocal(sqllock.NewPollFeed(fdb.Conn, "PRAGMA data_version", pollMin, pollMax))
	var once sync.Once
	var err error
	return local, func() error {
		once.Do(func() { err = errors.Join(local.Close(), fdb.Close()) })
		return err
	}
}

// sharedStore returns the in-process state of the store key, shared by all
// Backends of this process on it, and its release: the last release closes
// it.
func sharedStore(key string, feedDB func() *sql.DB) (*sqllock.Local, func() error) {
	stores.Lock()
	defer stores.Unlock()
	if stores.m == nil {
		stores.m = make(map[string]*storeRef)
	}
	r := stores.m[key]
	if r == nil {
		r = &storeRef{}
		r.local, r.close = newStore(feedDB)
		stores.m[key] = r
	}
	r.refs++
	var once sync.Once
	return r.local, func() error {
		var last bool
		once.Do(func() {
			stores.Lock()
			defer stores.Unlock()
			r.refs--
			if r.refs == 0 {
				delete(stores.m, key)
				last = true
			}
		})
		if last {
			return r.close()
		}
		return nil
	}
}

var stores struct {
	sync.Mutex
	m map[string]*storeRef
}

type storeRef struct {
	local *sqllock.Local
	close func() error
	refs  int
}

// mainFile returns the file of db's main database ("" for an in-memory or
// temporary one).
func mainFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int
			name, file sql.NullString
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", err
		}
		if name.String == "main" {
			return file.String, rows.Close()
		}
	}
	return "", rows.Err()
}

// parseVersion turns "3.51.1" into 3051001, and anything else into 0.
func parseVersion(s string) int {
	f := strings.Split(s, ".")
	if len(f) < 3 {
		return 0
	}
	v := 0
	for _, p := range f[:3] {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 999 {
			return 0
		}
		v = v*1000 + n
	}
	return v
}

// fileConnector opens connections to dsn through driver d.
func fileConnector(d driver.Driver, dsn string) driver.Connector {
	if dc, ok := d.(driver.DriverContext); ok {
		if c, err := dc.OpenConnector(dsn); err == nil {
			return c
		}
	}
	return dsnConnector{d: d, dsn: dsn}
}

type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// openErr is an error of Open: it names the file and matches
// dlock.ErrBackendUnavailable.
type openErr struct {
	path, msg string
	err       error
}

func openError(path, msg string, err error) error {
	return &openErr{path: path, msg: msg, err: err}
}

func (e *openErr) Error() string {
	s := "sqlite: open " + e.path
	if e.msg != "" {
		s += ": " + e.msg
	}
	// A missing directory is said in msg; other causes are shown.
	if e.err != nil && (e.msg == "" || !errors.Is(e.err, fs.ErrNotExist)) {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *openErr) Unwrap() []error {
	errs := []error{dlock.ErrBackendUnavailable}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
}

// invalid returns an error matching dlock.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return sqllock.Errorf(dlock.ErrInvalidOption, "sqlite: "+format, args...)
}

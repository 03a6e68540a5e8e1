package testserver

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const pgTimeout = 30 * time.Second

// postgresUser returns the uid and gid of the "postgres" system user, which
// runs initdb and postgres when the tests run as root.
func postgresUser() (uint32, uint32, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("user postgres not found (PostgreSQL refuses to run as root): apt-get install postgresql")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user postgres: bad ids %s:%s", u.Uid, u.Gid)
	}
	return uint32(uid), uint32(gid), nil
}

// PostgresServer is a PostgreSQL server (the postmaster run directly, not
// through pg_ctl), with trust authentication for the superuser "postgres"
// and the databases "postgres" and "test". Its data directory survives Kill
// and Restart; after Kill the next start does crash recovery.
type PostgresServer struct {
	*Process
	socketDir string
}

// DSN returns a URL for the "postgres" database, as pgx accepts it:
// postgres://postgres@127.0.0.1:port/postgres?sslmode=disable.
func (s *PostgresServer) DSN() string { return s.DSNFor("postgres") }

// TestDSN returns the URL for the database "test".
func (s *PostgresServer) TestDSN() string { return s.DSNFor("test") }

// DSNFor returns the URL for the given database.
func (s *PostgresServer) DSNFor(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

// SocketDir returns the directory of the server's Unix socket (for
// host=SocketDir()).
func (s *PostgresServer) SocketDir() string { return s.socketDir }

// Query runs sql in database db as the superuser over a new connection,
// with the simple query protocol, and returns the rows of the last result as
// text (NULL as ""). It is a helper for tests and fault injection, for
// example pg_terminate_backend, not a client.
func (s *PostgresServer) Query(ctx context.Context, db, sql string) ([][]string, error) {
	return pgQuery(ctx, s.Addr(), "postgres", db, sql)
}

// Postgres runs initdb in a temporary directory and starts postgres on a
// free loopback port (-c fsync=off), waits until a login and SELECT 1
// work, and creates the database "test". When the test runs as root, both
// run as the "postgres" system user. Stop uses SIGINT (fast shutdown), never
// SIGTERM, which would wait for every client to disconnect. Options: WithArgs
// (for example "-c", "max_connections=200"), WithStartTimeout.
func Postgres(t T, opts ...Option) *PostgresServer {
	t.Helper()
	Require(t, KindPostgres)
	initdb, _ := lookBinary("initdb")
	postgres, _ := lookBinary("postgres")
	cfg := newConfig(pgTimeout, opts)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		uid, gid, err := postgresUser()
		if err != nil {
			Unavailable(t, KindPostgres, "%v", err)
		}
		cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	}
	f := newFixture(t)
	s := &PostgresServer{}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		port, dir, err := f.portAndDir("pg")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
		data := filepath.Join(dir, "data")
		if err := runSetup(dir, cred, initdb, "-D", data, "-A", "trust", "-U", "postgres",
			"--no-sync", "-E", "UTF8", "--locale=C", "--no-instructions"); err != nil {
			return nil, err
		}
		addr := loopback(port)
		args := append([]string{postgres, "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir,
			"-c", "fsync=off"}, cfg.args...)
		p := newProcess("postgres", dir, addr, args)
		p.cred = cred
		p.stopSig = syscall.SIGINT
		p.gentleDown = true
		p.ready = func(ctx context.Context) error { return pgReady(ctx, addr) }
		s.Process, s.socketDir = p, dir
		return []*Process{p}, nil
	}, createTestDB(cfg.startTimeout, s.Query, "postgres", "CREATE DATABASE test"))
	return s
}

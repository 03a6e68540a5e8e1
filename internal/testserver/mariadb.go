package testserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

const mariadbTimeout = 30 * time.Second

// MariaDBServer is a MariaDB server (mariadbd run with --no-defaults), with
// the user root (empty password, reachable over TCP) and the database
// "test". Its data directory survives Kill and Restart; after Kill the next
// start does InnoDB crash recovery and committed rows survive.
type MariaDBServer struct {
	*Process
	socket string
}

// DSN returns the go-sql-driver/mysql DSN for the database "test":
// root@tcp(127.0.0.1:port)/test.
func (s *MariaDBServer) DSN() string { return s.DSNFor("test") }

// DSNFor returns the go-sql-driver/mysql DSN for the given database ("" for
// none).
func (s *MariaDBServer) DSNFor(db string) string {
	return fmt.Sprintf("root@tcp(%s)/%s", s.Addr(), db)
}

// Socket returns the path of the server's Unix socket.
func (s *MariaDBServer) Socket() string { return s.socket }

// Query logs in as root over a new connection (into db, unless empty), runs
// one statement and returns its rows as text (NULL as ""). It is a helper for
// tests and fault injection, for example KILL <id>, not a client.
func (s *MariaDBServer) Query(ctx context.Context, db, sql string) ([][]string, error) {
	return mysqlQuery(ctx, s.Addr(), "root", db, sql)
}

// MariaDB runs mariadb-install-db in a temporary directory and starts
// mariadbd on a free loopback port, waits until root can log in over TCP and
// run SELECT 1, and creates the database "test". Options: WithArgs (mariadbd
// options, for example "--max-connections=300"), WithStartTimeout.
func MariaDB(t T, opts ...Option) *MariaDBServer {
	t.Helper()
	Require(t, KindMariaDB)
	installDB, _ := lookBinary("mariadb-install-db")
	mariadbd, _ := lookBinary("mariadbd")
	cfg := newConfig(mariadbTimeout, opts)
	asRoot := os.Geteuid() == 0
	f := newFixture(t)
	s := &MariaDBServer{}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		port, dir, err := f.portAndDir("mariadb")
		if err != nil {
			return nil, err
		}
		data := filepath.Join(dir, "data")
		// A temporary directory of its own: in the shared /tmp, a
		// bootstrap's temporary table vanished under it once in CI
		// ("Error on delete of '/tmp/#sql-temptable-...'").
		tmp := filepath.Join(dir, "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			return nil, err
		}
		iargs := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
			"--skip-test-db", "--innodb-log-file-size=8M", "--tmpdir=" + tmp}
		if asRoot {
			iargs = append(iargs, "--user=root")
		}
		if err := runSetup(dir, nil, installDB, iargs...); err != nil {
			return nil, err
		}
		addr := loopback(port)
		socket := filepath.Join(dir, "sock")
		args := []string{mariadbd, "--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1", "--socket=" + socket, "--pid-file=" + filepath.Join(dir, "pid"),
			"--innodb-log-file-size=8M", "--tmpdir=" + tmp}
		if asRoot {
			args = append(args, "--user=root")
		}
		args = append(args, cfg.args...)
		p := newProcess("mariadb", dir, addr, args)
		p.ready = func(ctx context.Context) error { return mysqlReady(ctx, addr) }
		s.Process, s.socket = p, socket
		return []*Process{p}, nil
	}, createTestDB(cfg.startTimeout, s.Query, "", "CREATE DATABASE IF NOT EXISTS test"))
	return s
}

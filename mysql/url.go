package mysql

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/go-sql-driver/mysql"
)

func init() {
	dlock.Register("mysql", func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
		mc, opts, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return open(ctx, mc, opts)
	})
}

// ParseURL translates a mysql:// URL into the driver's configuration and
// the backend's options:
//
//	mysql://user:password@host:3306/db?param=value   → user:password@tcp(host:3306)/db?param=value
//	mysql://user@localhost/db?socket=/run/mysqld/mysqld.sock → user@unix(/run/mysqld/mysqld.sock)/db
//
// The port defaults to 3306 and the database must be named. These query
// parameters are the backend's and are removed:
//
//	table=NAME            the lease table (Table)
//	waiter_timeout=DUR    a Go duration (WaiterTimeout)
//	mode=lease|session    lease-table mode (the default) or session mode (Session)
//	migrate=true|false    create the tables if missing (the default), or only check them (NoMigrate)
//	socket=PATH           connect over the Unix socket PATH instead of TCP
//	connect_timeout=DUR   a Go duration or whole seconds (ConnectTimeout); the
//	                      driver's timeout=DUR means the same, give one of them
//
// All others are go-sql-driver/mysql DSN parameters (tls, charset, a
// system variable such as innodb_lock_wait_timeout, …).
func ParseURL(u *url.URL) (cfg *mysql.Config, opts []Option, err error) {
	const form = "want mysql://[user[:password]@]host[:port]/database[?params]"
	if u.Scheme != "mysql" {
		return nil, nil, invalid("URL scheme %q is not mysql", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, nil, invalid("URL %q: %s", u.Redacted(), form)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, nil, invalid("URL %q names no database or more than a name; %s", u.Redacted(), form)
	}
	q := u.Query()
	if vs, ok := q["table"]; ok {
		opts = append(opts, Table(vs[len(vs)-1]))
		q.Del("table")
	}
	if vs, ok := q["waiter_timeout"]; ok {
		d, err := time.ParseDuration(vs[len(vs)-1])
		if err != nil {
			return nil, nil, invalid("URL %q: waiter_timeout: %v", u.Redacted(), err)
		}
		opts = append(opts, WaiterTimeout(d))
		q.Del("waiter_timeout")
	}
	if vs, ok := q["migrate"]; ok {
		opts = append(opts, migrateParam(vs[len(vs)-1]))
		q.Del("migrate")
	}
	if vs, ok := q["mode"]; ok {
		opts = append(opts, mode(vs[len(vs)-1]))
		q.Del("mode")
	}
	if _, ok := q[connect.Param]; ok {
		if _, both := q["timeout"]; both {
			return nil, nil, invalid("URL %q: connect_timeout and timeout are the same setting; give one", u.Redacted())
		}
		d, err := connect.Take(q, 0)
		if err != nil {
			return nil, nil, invalid("URL %q: %v", u.Redacted(), err)
		}
		opts = append(opts, ConnectTimeout(d))
	}
	network, addr := "tcp", u.Host
	if vs, ok := q["socket"]; ok {
		network, addr = "unix", vs[len(vs)-1]
		q.Del("socket")
	} else if u.Port() == "" {
		addr = u.Host + ":3306"
	}
	// The parameters go through the driver's own parser; user and
	// password are set afterwards, so that no character in them needs
	// escaping in a DSN.
	dsn := network + "(" + addr + ")/" + db
	if len(q) > 0 {
		dsn += "?" + q.Encode()
	}
	cfg, err = mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, invalid("URL %q: %v", u.Redacted(), err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, opts, nil
}

package postgres

import (
	"context"
	"net/url"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
)

func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		dlock.Register(scheme, func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
			dsn, opts, err := ParseURL(u)
			if err != nil {
				return nil, err
			}
			return open(ctx, dsn, opts)
		})
	}
}

// ParseURL splits a postgres:// or postgresql:// URL into the pgx
// connection string and the backend's options. The URL is pgx's
// (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS:
// user, password, host, port, database, sslmode and the other libpq
// parameters) plus these query parameters, which are removed before the
// rest goes to pgx:
//
//	table=NAME            the lease table (Table)
//	waiter_timeout=DUR    a Go duration (WaiterTimeout)
//	mode=lease|session    lease-table mode (the default) or session mode (Session)
//	migrate=true|false    create the tables if missing (the default), or only check them (NoMigrate)
//	connect_timeout=DUR   whole seconds (libpq's form) or a Go duration (ConnectTimeout)
//
// Example: postgres://app:secret@db.example:5432/app?sslmode=require&table=locks
func ParseURL(u *url.URL) (dsn string, opts []Option, err error) {
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", nil, invalid("URL scheme %q is not postgres or postgresql", u.Scheme)
	}
	if u.Opaque != "" {
		return "", nil, invalid("URL %q: want postgres://[user[:password]@]host[:port]/database[?params]", u.Redacted())
	}
	q := u.Query()
	if vs, ok := q["table"]; ok {
		opts = append(opts, Table(vs[len(vs)-1]))
		q.Del("table")
	}
	if vs, ok := q["waiter_timeout"]; ok {
		d, err := time.ParseDuration(vs[len(vs)-1])
		if err != nil {
			return "", nil, invalid("URL %q: waiter_timeout: %v", u.Redacted(), err)
		}
		opts = append(opts, WaiterTimeout(d))
		q.Del("waiter_timeout")
	}
	if vs, ok := q["migrate"]; ok {
		opts = append(opts, migrateParam(vs[len(vs)-1]))
		q.Del("migrate")
	}
	if _, ok := q[connect.Param]; ok {
		d, err := connect.Take(q, 0)
		if err != nil {
			return "", nil, invalid("URL %q: %v", u.Redacted(), err)
		}
		opts = append(opts, ConnectTimeout(d))
	}
	if vs, ok := q["mode"]; ok {
		opts = append(opts, mode(vs[len(vs)-1]))
		q.Del("mode")
	}
	v := *u
	v.RawQuery = q.Encode()
	return v.String(), opts, nil
}

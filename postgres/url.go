package postgres

import (
	"net/url"
	"strings"

	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/urlq"
)

func init() { connect.Register([]string{"postgres", "postgresql"}, ParseURL, Open) }

// ParseURL splits a postgres:// or postgresql:// URL into the pgx
// connection string and the backend's options. The URL is libpq's
// (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS)
// plus these query parameters, which are removed before the rest goes to
// pgx:
//
//	table=NAME            the lease table (Table)
//	waiter_timeout=DUR    a Go duration (WaiterTimeout)
//	mode=lease|session    lease-table mode (the default) or session mode (Session)
//	migrate=true|false    create the tables if missing (the default), or only check them (NoMigrate)
//	connect_timeout=DUR   whole seconds (libpq's form) or a Go duration (ConnectTimeout)
//	pool_max_conns=N      the connections Open's pool keeps, at least 1 (PoolMaxConns)
//
// The other parameters must be libpq's (sslmode, application_name, …) or
// pgx's; any other, or one given twice, is an error matching
// [dlock.ErrInvalidOption].
//
// Example: postgres://app:secret@db.example:5432/app?sslmode=require&table=locks
func ParseURL(u *url.URL) (dsn string, opts []Option, err error) {
	q := urlq.Parse("postgres", u)
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", nil, q.Errorf("scheme %q is not postgres or postgresql", u.Scheme)
	}
	if u.Opaque != "" {
		return "", nil, q.Errorf("want postgres://[user[:password]@]host[:port]/database[?params]")
	}
	for _, set := range sqllock.URLParams(q, true) {
		opts = append(opts, option(set))
	}
	rest, err := q.Done(func(k string) bool { return driverParams[k] })
	if err != nil {
		return "", nil, err
	}
	v := *u
	v.RawQuery = rest.Encode()
	return v.String(), opts, nil
}

// driverParams are the parameters passed on to pgx: libpq's connection
// parameters and pgx's own.
var driverParams = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields(`host hostaddr port dbname database user password passfile
		require_auth channel_binding client_encoding options application_name
		fallback_application_name keepalives keepalives_idle keepalives_interval
		keepalives_count tcp_user_timeout replication gssencmode sslmode requiressl
		sslnegotiation sslcompression sslcert sslkey sslpassword sslcertmode sslrootcert
		sslcrl sslcrldir sslsni requirepeer ssl_min_protocol_version
		ssl_max_protocol_version krbsrvname krbspn gsslib gssdelegation service
		servicefile target_session_attrs load_balance_hosts statement_cache_capacity
		description_cache_capacity default_query_exec_mode min_read_buffer_size`) {
		m[k] = true
	}
	return m
}()

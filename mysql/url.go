package mysql

import (
	"net/url"
	"strings"

	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/urlq"
	"github.com/go-sql-driver/mysql"
)

func init() { connect.Register([]string{"mysql"}, ParseURL, Open) }

// ParseURL translates a mysql:// URL into the driver's DSN and the
// backend's options:
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
//	pool_max_conns=N      the connections Open's pool keeps, at least 1 (PoolMaxConns)
//	socket=PATH           connect over the Unix socket PATH instead of TCP
//	connect_timeout=DUR   a Go duration or whole seconds (ConnectTimeout); the
//	                      driver's timeout=DUR means the same, give one of them
//
// The others must be go-sql-driver/mysql DSN parameters (tls, charset,
// readTimeout, …) or system variables, which have an underscore in their
// name (innodb_lock_wait_timeout, …); any other, or one given twice, is an
// error matching [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (dsn string, opts []Option, err error) {
	const form = "want mysql://[user[:password]@]host[:port]/database[?params]"
	q := urlq.Parse("mysql", u)
	if u.Scheme != "mysql" {
		return "", nil, q.Errorf("scheme %q is not mysql", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return "", nil, q.Errorf("%s", form)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", nil, q.Errorf("names no database or more than a name; %s", form)
	}
	for _, set := range sqllock.URLParams(q, true) {
		opts = append(opts, option(set))
	}
	network, addr := "tcp", u.Host
	if s, ok := q.String("socket"); ok {
		network, addr = "unix", s
	} else if u.Port() == "" {
		addr = u.Host + ":3306"
	}
	rest, err := q.Done(driverParam)
	if err != nil {
		return "", nil, err
	}
	if _, both := rest["timeout"]; both && u.Query().Has(connect.Param) {
		return "", nil, q.Errorf("connect_timeout and timeout are the same setting; give one")
	}
	// The parameters go through the driver's own parser; user and
	// password are set afterwards, so that no character in them needs
	// escaping in a DSN.
	s := network + "(" + addr + ")/" + db
	if len(rest) > 0 {
		s += "?" + rest.Encode()
	}
	cfg, err := mysql.ParseDSN(s)
	if err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg.FormatDSN(), opts, nil
}

// driverParam reports whether the driver takes the parameter k: one of
// go-sql-driver/mysql's, or a system variable (a lower-case name with an
// underscore).
func driverParam(k string) bool {
	switch k {
	case "allowAllFiles", "allowCleartextPasswords", "allowFallbackToPlaintext",
		"allowNativePasswords", "allowOldPasswords", "charset", "checkConnLiveness",
		"clientFoundRows", "collation", "columnsWithAlias", "compress",
		"connectionAttributes", "interpolateParams", "loc", "maxAllowedPacket",
		"multiStatements", "parseTime", "readTimeout", "rejectReadOnly",
		"serverPubKey", "timeout", "timeTruncate", "tls", "writeTimeout":
		return true
	}
	return strings.Contains(k, "_") && strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
}

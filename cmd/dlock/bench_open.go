package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/mem"
	"github.com/dlock-dev/dlock/mysql"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/dlock-dev/dlock/redis"
	"github.com/dlock-dev/dlock/redlock"
	"github.com/dlock-dev/dlock/sqlite"
	"github.com/dlock-dev/dlock/zookeeper"
	goredis "github.com/redis/go-redis/v9"
)

// benchOpeners open one more backend for a URL scheme: dlock bench gives
// each contender a backend (a connection) of its own, and wraps them to
// count their calls, which dlock.Open's Client does not allow.
var benchOpeners = map[string]dlock.OpenFunc{
	"etcd":     connect.Opener(etcd.ParseURL, etcd.Open),
	"mysql":    connect.Opener(mysql.ParseURL, mysql.Open),
	"postgres": connect.Opener(postgres.ParseURL, postgres.Open),
	"redis":    connect.Opener(redis.ParseURL, redis.Open),
	"redlock":  connect.Opener(redlock.ParseURL, redlock.Open),
	"sqlite":   connect.Opener(sqlite.ParseURL, sqlite.Open),
	"zk":       connect.Opener(zookeeper.ParseURL, zookeeper.Open),
}

// benchOpener returns the opener of u's scheme: the one of its family
// (rediss+cluster is redis's, postgresql postgres's).
func benchOpener(u *url.URL) (dlock.OpenFunc, error) {
	family, _, _ := strings.Cut(u.Scheme, "+")
	switch family {
	case "rediss", "redlocks":
		family = strings.TrimSuffix(family, "s")
	case "zookeeper":
		family = "zk"
	case "postgresql":
		family = "postgres"
	case "mem":
		// mem:// is a store of its own at every Open: share one.
		s := mem.NewStore()
		if u.Host != "" {
			s = mem.Named(u.Host)
		}
		return func(context.Context, *url.URL) (dlock.Backend, error) { return s.Backend(), nil }, nil
	}
	if open, ok := benchOpeners[family]; ok {
		return open, nil
	}
	return nil, fmt.Errorf("bench: cannot open several connections to a %q URL", u.Scheme)
}

// storeCounter returns a count of the requests the store served so far,
// where the store tells, and what it counts; nil if it does not tell.
// Redis (a single node, without TLS) tells its commands: INFO stats,
// total_commands_processed, less the INFO commands themselves.
func storeCounter(ctx context.Context, u *url.URL) (count func() int64, what string, closer func()) {
	if u.Scheme != "redis" {
		return nil, "", func() {}
	}
	opts := &goredis.Options{Addr: u.Host, DialTimeout: 10 * time.Second}
	if u.User != nil {
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
	}
	if db, err := strconv.Atoi(strings.Trim(u.Path, "/")); err == nil {
		opts.DB = db
	}
	c := goredis.NewClient(opts)
	var reads, last atomic.Int64
	read := func() (int64, error) {
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return 0, err
		}
		_, v, _ := strings.Cut(info, "total_commands_processed:")
		v, _, _ = strings.Cut(v, "\r\n")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		// The count does not include this INFO, but does include the
		// ones before it.
		return n - reads.Add(1) + 1, err
	}
	n, err := read()
	if err != nil {
		c.Close()
		return nil, "", func() {}
	}
	last.Store(n)
	count = func() int64 {
		// A read that fails (rare: the server answers the workload)
		// counts nothing since the last.
		if n, err := read(); err == nil {
			last.Store(n)
		}
		return last.Load()
	}
	return count, "Redis commands (INFO stats, all clients of the server)", func() { c.Close() }
}

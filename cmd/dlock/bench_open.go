package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
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
// where the store tells, and what it counts; nil if it does not tell. The
// count is the store's own, for all its clients, less what reading it
// costs (measured by two reads in a row when it starts).
func storeCounter(ctx context.Context, u *url.URL) (count func() int64, what string, closer func()) {
	read, what, closer := storeReader(u)
	if read == nil {
		return nil, "", func() {}
	}
	n0, err0 := read(ctx)
	n1, err1 := read(ctx)
	if err0 != nil || err1 != nil {
		closer()
		return nil, "", func() {}
	}
	cost := max(0, n1-n0)
	var reads, last atomic.Int64
	last.Store(n1 - cost)
	reads.Store(1)
	return func() int64 {
		// A read that fails (rare: the store answers the workload)
		// counts nothing since the last.
		if n, err := read(ctx); err == nil {
			last.Store(n - cost*reads.Add(1))
		}
		return last.Load()
	}, what, closer
}

// storeReader returns what reads the store's count of requests, for the
// stores that keep one: Redis (a single node without TLS: INFO stats),
// etcd (its /metrics, gRPC messages received), ZooKeeper (mntr, packets
// received) and MySQL/MariaDB (SHOW GLOBAL STATUS, Questions).
func storeReader(u *url.URL) (read func(context.Context) (int64, error), what string, closer func()) {
	host, _, _ := strings.Cut(u.Host, ",") // the first of several
	switch u.Scheme {
	case "redis":
		return redisReader(u), "Redis commands, those its scripts run included (INFO stats, total_commands_processed)", func() {}
	case "etcd":
		return etcdReader(host), "etcd gRPC messages received (/metrics, grpc_server_msg_received_total)", func() {}
	case "zk", "zookeeper":
		return zkReader(host), "ZooKeeper packets received (mntr, zk_packets_received)", func() {}
	case "mysql":
		dsn, _, err := mysql.ParseURL(u)
		if err != nil {
			return nil, "", func() {}
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, "", func() {}
		}
		return func(ctx context.Context) (int64, error) {
			var name string
			var n int64
			err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
			return n, err
		}, "MySQL statements (SHOW GLOBAL STATUS, Questions)", func() { db.Close() }
	}
	return nil, "", nil
}

func redisReader(u *url.URL) func(context.Context) (int64, error) {
	opts := &goredis.Options{Addr: u.Host, DialTimeout: 10 * time.Second, MaxRetries: -1}
	if u.User != nil {
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
	}
	if db, err := strconv.Atoi(strings.Trim(u.Path, "/")); err == nil {
		opts.DB = db
	}
	return func(ctx context.Context) (int64, error) {
		// A connection per read: the count is read a few times per
		// workload, and no client is left open.
		c := goredis.NewClient(opts)
		defer c.Close()
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return 0, err
		}
		return sumField(info, "total_commands_processed:", ":")
	}
}

func etcdReader(host string) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if err != nil {
			return 0, err
		}
		return sumField(string(body), "grpc_server_msg_received_total{", " ")
	}
}

func zkReader(host string) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("mntr")); err != nil {
			return 0, err
		}
		out, err := io.ReadAll(io.LimitReader(conn, 1<<20))
		if err != nil {
			return 0, err
		}
		return sumField(string(out), "zk_packets_received\t", "\t")
	}
}

// sumField adds up the numbers that end the lines of text starting with
// prefix, after their last sep; it fails if there is none.
func sumField(text, prefix, sep string) (int64, error) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, sep)+len(sep):], 64)
		if err != nil {
			return 0, fmt.Errorf("store counter %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("store counter: no %q in the store's answer", prefix)
	}
	return int64(sum), nil
}

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestStoreCounters: on every store that counts its requests, the count
// dlock bench reads grows by at least two per Lock and Unlock.
func TestStoreCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return "redis://" + testserver.Redis(t).Addr() }},
		{"etcd", func(t *testing.T) string { return "etcd://" + testserver.Etcd(t).Addr() + "/bench" }},
		{"zookeeper", func(t *testing.T) string { return "zk://" + testserver.ZooKeeper(t).Addr() }},
		{"mysql", func(t *testing.T) string { return "mysql://root@" + testserver.MariaDB(t).Addr() + "/test" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			u, err := url.Parse(tc.url(t))
			if err != nil {
				t.Fatal(err)
			}
			count, what, closer := storeCounter(ctx, u)
			if count == nil || what == "" {
				t.Fatalf("%s: no store counter", u.Redacted())
			}
			defer closer()
			open, err := benchOpener(u)
			if err != nil {
				t.Fatal(err)
			}
			be, err := open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			c, err := dlock.New(be)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			n0 := count()
			const ops = 10
			for range ops {
				l, err := c.Mutex("dlockbench/counted").Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			n1 := count()
			if n1-n0 < 2*ops {
				t.Errorf("%s: %d requests for %d Lock+Unlock; want >= %d", what, n1-n0, ops, 2*ops)
			}
			t.Logf("%s: %d for %d Lock+Unlock", what, n1-n0, ops)
		})
	}
}

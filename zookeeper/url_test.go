package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		addr string
		bad  bool
	}{
		{url: "zk://h1:2181,h2:2182/chroot", addr: "h1:2181,h2:2182"},
		{url: "zk://h1,h2/", addr: "h1:2181,h2:2181"},
		{url: "zk://127.0.0.1:2181?session_timeout=10s&loss=disconnect", addr: "127.0.0.1:2181"},
		{url: "zookeeper://h1:2181/x", addr: "h1:2181"},
		{url: "zk://h1:2181/x?loss=sometimes", bad: true},
		{url: "zk://h1:2181/x?session_timeout=soon", bad: true},
		{url: "zk://h1:2181/x?session_timeout=-1s", bad: true},
		{url: "zk://h1:2181/x?colour=blue", bad: true},
		{url: "zk://user:pw@h1:2181/x", bad: true},
		{url: "zk:///x", bad: true},
		{url: "zk://h1:2181/a//b", bad: true},
		{url: "zk://h1:2181/a/../b", bad: true},
		{url: "zk://h1:2181/x?loss=session&loss=disconnect", bad: true},
		{url: "zk://h1:2181/x?session_timeout=1s;loss=session", bad: true},
		{url: "zk://h1:2181/x?connect_timeout=-1s", bad: true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		addr, _, err := zookeeper.ParseURL(u)
		if tc.bad {
			if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(fmt.Sprint(err), "zookeeper") {
				t.Errorf("%s: %v, want ErrInvalidOption naming zookeeper", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if addr != tc.addr {
			t.Errorf("%s: addr %q, want %q", tc.url, addr, tc.addr)
		}
	}
}

// Open and New refuse bad arguments with ErrInvalidOption before they
// reach a server.
func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	for name, err := range map[string]error{
		"Open without servers": func() error { _, err := zookeeper.Open(ctx, " , "); return err }(),
		"Open with a negative session timeout": func() error {
			_, err := zookeeper.Open(ctx, "127.0.0.1:1", zookeeper.SessionTimeout(-time.Second))
			return err
		}(),
		"Open with a relative root": func() error { _, err := zookeeper.Open(ctx, "127.0.0.1:1", zookeeper.Root("locks")); return err }(),
		"New without a connection":  func() error { _, err := zookeeper.New(nil); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(fmt.Sprint(err), "zookeeper") {
			t.Errorf("%s: %v, want ErrInvalidOption naming zookeeper", name, err)
		}
	}
}

package zookeeper_test

import (
	"errors"
	"net/url"
	"reflect"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		servers []string
		bad     bool
	}{
		{url: "zk://h1:2181,h2:2182/chroot", servers: []string{"h1:2181", "h2:2182"}},
		{url: "zk://h1,h2/", servers: []string{"h1:2181", "h2:2181"}},
		{url: "zk://127.0.0.1:2181?session_timeout=10s&loss=disconnect", servers: []string{"127.0.0.1:2181"}},
		{url: "zookeeper://h1:2181/x", servers: []string{"h1:2181"}},
		{url: "zk://h1:2181/x?loss=sometimes", bad: true},
		{url: "zk://h1:2181/x?session_timeout=soon", bad: true},
		{url: "zk://h1:2181/x?session_timeout=-1s", bad: true},
		{url: "zk://h1:2181/x?colour=blue", bad: true},
		{url: "zk://user:pw@h1:2181/x", bad: true},
		{url: "zk:///x", bad: true},
		{url: "zk://h1:2181/a//b", bad: true},
		{url: "zk://h1:2181/a/../b", bad: true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		servers, _, err := zookeeper.ParseURL(u)
		if tc.bad {
			if !errors.Is(err, dlock.ErrInvalidOption) {
				t.Errorf("%s: %v, want ErrInvalidOption", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !reflect.DeepEqual(servers, tc.servers) {
			t.Errorf("%s: servers %v, want %v", tc.url, servers, tc.servers)
		}
	}
}

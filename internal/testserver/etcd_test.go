package testserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func etcdPut(t *testing.T, addr, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"key":%q,"value":%q}`,
		base64.StdEncoding.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString([]byte(value)))
	if _, err := etcdHTTP(ctx, addr, "POST", "/v3/kv/put", []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func etcdGet(t *testing.T, addr, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte(key)))
	b, err := etcdHTTP(ctx, addr, "POST", "/v3/kv/range", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Kvs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("range: %v: %s", err, b)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

func TestEtcdKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Etcd(t)
	t.Logf("etcd ready in %v at %s", time.Since(start), s.Endpoint())
	st, err := s.Status()
	if err != nil || st.MemberID == 0 || st.Leader != st.MemberID || st.Version == "" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	etcdPut(t, s.Addr(), "k", "v")
	if v := etcdGet(t, s.Addr(), "k"); v != "v" {
		t.Fatalf("get = %q", v)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd restarted in %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	if v := etcdGet(t, s.Addr(), "k"); v != "v" {
		t.Fatalf("get after restart = %q", v)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := EtcdCluster(t, 3)
	t.Logf("etcd cluster ready in %v at %v", time.Since(start), g.Endpoints())
	leader, err := g.WaitLeader(0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for _, n := range g.Nodes() {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		ids[st.MemberID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("member ids %v, want 3 distinct", ids)
	}
	etcdPut(t, g.Node((leader+1)%3).Addr(), "k", "v")
	if err := g.Node(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	nl, err := g.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new leader %d (old %d) after %v", nl, leader, time.Since(start))
	if nl == leader {
		t.Fatal("the killed member is still the leader")
	}
	if err := g.Node(leader).Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WaitLeader(0); err != nil {
		t.Fatal(err)
	}
	if v := etcdGet(t, g.Node(leader).Addr(), "k"); v != "v" {
		t.Fatalf("get on the restarted member = %q", v)
	}
}

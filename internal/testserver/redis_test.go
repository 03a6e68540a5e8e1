package testserver

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func redisDo(t *testing.T, addr string, args ...string) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := respDo(ctx, addr, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Redis(t)
	t.Logf("redis ready in %v at %s (pid %d)", time.Since(start), s.Addr(), s.PID())
	if v := redisDo(t, s.Addr(), "SET", "k", "v"); v != "OK" {
		t.Fatalf("SET: %v", v)
	}
	if v := redisDo(t, s.Addr(), "GET", "k"); v != "v" {
		t.Fatalf("GET: %v", v)
	}
	addr, pid := s.Addr(), s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.PID() != 0 {
		t.Fatal("still running after Kill")
	}
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Kill: %v, want ErrNotRunning", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("port still open after Kill")
	}
	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis restarted in %v", time.Since(start))
	if s.Addr() != addr || s.PID() == pid || s.PID() == 0 {
		t.Fatalf("after restart: addr %s pid %d (before %s %d)", s.Addr(), s.PID(), addr, pid)
	}
	if v := redisDo(t, s.Addr(), "GET", "k"); v != nil {
		t.Fatalf("GET after restart: %v, want nil (nothing persisted)", v)
	}
	// Restart of a running server stops it gracefully first.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Log(), "Ready to accept connections") {
		t.Errorf("log lacks the ready line:\n%s", s.Log())
	}
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	s := Redis(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if !s.Paused() {
		t.Fatal("not paused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := s.Do(ctx, "PING")
	cancel()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING while paused: %v, want a timeout", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if v := redisDo(t, s.Addr(), "PING"); v != "PONG" {
		t.Fatalf("PING after resume: %v", v)
	}
	// Kill works on a paused server too.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
}

func TestRedisStopPaused(t *testing.T) {
	t.Parallel()
	s := Redis(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop of a paused server took %v", d)
	}
}

func TestRedisN(t *testing.T) {
	t.Parallel()
	g := RedisN(t, 3)
	seen := map[string]bool{}
	for i, a := range g.Addrs() {
		if seen[a] {
			t.Fatalf("duplicate address %s", a)
		}
		seen[a] = true
		redisDo(t, a, "SET", "k", a)
		if g.Node(i).Addr() != a {
			t.Fatalf("Node(%d).Addr() = %s, want %s", i, g.Node(i).Addr(), a)
		}
	}
	if err := g.Node(1).Kill(); err != nil {
		t.Fatal(err)
	}
	for i, a := range g.Addrs() {
		if i == 1 {
			continue
		}
		if v := redisDo(t, a, "GET", "k"); v != a {
			t.Fatalf("independent node %d: GET = %v", i, v)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := RedisCluster(t, 3)
	t.Logf("redis cluster ok in %v at %v", time.Since(start), c.Addrs())
	for _, n := range c.Nodes() {
		info, _ := redisDo(t, n.Addr(), "CLUSTER", "INFO").(string)
		if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_assigned") != "16384" {
			t.Fatalf("%s: %s", n.Addr(), info)
		}
	}
	// A key lives on exactly one master; the others answer MOVED to it.
	var owner string
	for _, a := range c.Addrs() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := respDo(ctx, a, "SET", "somekey", "v")
		cancel()
		if err == nil {
			owner = a
			continue
		}
		if !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatalf("SET on %s: %v", a, err)
		}
	}
	if owner == "" {
		t.Fatal("no node accepted the key")
	}
	// Kill a master: the cluster fails; restart it: ok again.
	if err := c.Node(0).Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Node(0).Restart(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := c.WaitOK(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ok again %v after restart", time.Since(start))
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := RedisSentinel(t, WithSentinelDownAfter(time.Second))
	t.Logf("redis sentinel ready in %v", time.Since(start))
	m, err := g.CurrentMaster()
	if err != nil || m != g.Master().Addr() {
		t.Fatalf("CurrentMaster = %q, %v; want %s", m, err, g.Master().Addr())
	}
	// Replication is asynchronous: without WAIT (on the same connection
	// as the write) the write can be lost in the failover below.
	c, err := net.DialTimeout("tcp", m, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(append(respCommand([]string{"SET", "k", "v"}), respCommand([]string{"WAIT", "1", "5000"})...))
	r := bufio.NewReader(c)
	if v, err := respRead(r); v != "OK" {
		t.Fatalf("SET: %v %v", v, err)
	}
	if v, err := respRead(r); v != int64(1) {
		t.Fatalf("WAIT: %v %v", v, err)
	}
	c.Close()
	if err := g.Master().Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	nm, err := g.WaitFailover(m, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s in %v", nm, time.Since(start))
	if nm != g.Replica().Addr() {
		t.Fatalf("new master %s, want the replica %s", nm, g.Replica().Addr())
	}
	if err := g.Master().RestartAsReplicaOf(nm); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := redisDo(t, g.Master().Addr(), "INFO", "replication").(string)
		if infoField(info, "master_link_status") == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old master not linked as replica: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := redisDo(t, g.Master().Addr(), "GET", "k"); v != "v" {
		t.Fatalf("GET on the old master after it rejoined: %v", v)
	}
}

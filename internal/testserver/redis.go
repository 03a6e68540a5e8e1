package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const redisTimeout = 15 * time.Second

// RedisServer is a redis-server process. Nothing is persisted (--save "",
// --appendonly no), so a restarted server starts empty (a cluster node keeps
// its nodes.conf, hence its node ID and slots).
type RedisServer struct {
	*Process
}

// Do sends one command to the server on a new connection and returns the
// reply: string, int64, nil, []any, or an error (RedisError for error
// replies). It is a small helper for tests and fault injection, not a client.
func (s *RedisServer) Do(ctx context.Context, args ...string) (any, error) {
	return respDo(ctx, s.Addr(), args...)
}

// RestartAsReplicaOf stops the server if it runs and starts it again (same
// port) as a replica of master ("host:port"), and waits until it answers
// PING. The replica setting stays for later restarts. Use it to bring back an
// old master after a Sentinel failover without it accepting writes first.
func (s *RedisServer) RestartAsReplicaOf(master string) error {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return fmt.Errorf("testserver: RestartAsReplicaOf(%q): %w", master, err)
	}
	if s.Running() {
		if err := s.Stop(); err != nil && !errors.Is(err, ErrNotRunning) {
			return err
		}
	}
	args := s.Args()
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--replicaof" || args[i] == "--slaveof" {
			i += 2
			continue
		}
		out = append(out, args[i])
	}
	s.setArgs(append(out, "--replicaof", host, port))
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitReady()
}

func redisArgs(bin string, port int, dir string, extra ...string) []string {
	return append([]string{bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
		"--enable-debug-command", "yes", "--repl-diskless-sync-delay", "0",
	}, extra...)
}

func newRedisProcess(f *fixture, name string, args func(dir string, port int) []string) (*Process, error) {
	port, dir, err := f.portAndDir("redis")
	if err != nil {
		return nil, err
	}
	addr := loopback(port)
	p := newProcess(name, dir, addr, args(dir, port))
	p.ready = func(ctx context.Context) error { return redisPing(ctx, addr) }
	return p, nil
}

// Redis starts one redis-server on a free loopback port and waits until it
// answers PING. It skips the test if redis-server is not installed (fails
// under DLOCK_TEST_REQUIRE). Options: WithArgs, WithStartTimeout.
func Redis(t T, opts ...Option) *RedisServer {
	t.Helper()
	return redisN(t, 1, "redis", opts).nodes[0]
}

// RedisGroup is a set of independent redis-server processes (for Redlock).
type RedisGroup struct {
	group[*RedisServer]
}

// Node returns the i-th server (from 0).
func (g *RedisGroup) Node(i int) *RedisServer { return g.nodes[i] }

// Nodes returns all servers.
func (g *RedisGroup) Nodes() []*RedisServer { return append([]*RedisServer(nil), g.nodes...) }

// RedisN starts n independent redis-server processes (not a cluster), for
// example the masters of a Redlock.
func RedisN(t T, n int, opts ...Option) *RedisGroup {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: RedisN(%d): need at least 1", n)
	}
	return redisN(t, n, "", opts)
}

func redisN(t T, n int, single string, opts []Option) *RedisGroup {
	t.Helper()
	Require(t, KindRedis)
	bin, _ := lookBinary("redis-server")
	cfg := newConfig(redisTimeout, opts)
	f := newFixture(t)
	g := &RedisGroup{}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		return g.build(n, func(i int) (*RedisServer, error) {
			name := single
			if name == "" {
				name = fmt.Sprintf("redis[%d]", i)
			}
			p, err := newRedisProcess(f, name, func(dir string, port int) []string {
				return redisArgs(bin, port, dir, cfg.args...)
			})
			return &RedisServer{p}, err
		})
	}, nil)
	return g
}

// RedisClusterGroup is a Redis Cluster of masters (no replicas), the 16384
// slots split evenly in node order. Its nodes are the masters; Addrs are the
// seed addresses for a cluster client.
type RedisClusterGroup struct {
	group[*RedisServer]
	timeout time.Duration
}

// Node returns the i-th master (from 0).
func (g *RedisClusterGroup) Node(i int) *RedisServer { return g.nodes[i] }

// Nodes returns all masters.
func (g *RedisClusterGroup) Nodes() []*RedisServer { return append([]*RedisServer(nil), g.nodes...) }

// WaitOK waits until every running node reports cluster_state:ok and knows
// all nodes, for at most timeout (0 means the start timeout). After a killed
// master is restarted this takes a few seconds (node timeout 2 s).
func (g *RedisClusterGroup) WaitOK(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = g.timeout
	}
	if err := waitFor(timeout, 50*time.Millisecond, g.clusterOK); err != nil {
		return fmt.Errorf("testserver: redis cluster not ok %w", err)
	}
	return nil
}

// clusterOK checks that every running node reports cluster_state:ok and
// knows all nodes.
func (g *RedisClusterGroup) clusterOK() error {
	for _, n := range g.nodes {
		if !n.Running() {
			continue
		}
		ctx, cancel := ctxTimeout(time.Second)
		v, err := n.Do(ctx, "CLUSTER", "INFO")
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		info, _ := v.(string)
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", n.name, st)
		}
		if k := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(len(g.nodes)) {
			return fmt.Errorf("%s: cluster_known_nodes:%s", n.name, k)
		}
	}
	return nil
}

// RedisCluster starts a Redis Cluster of n masters (n >= 1, no replicas;
// cluster-node-timeout 2000 ms), each with a free data port and a free
// cluster bus port, assigns the slots, joins the nodes and waits until
// every node reports cluster_state:ok.
func RedisCluster(t T, n int, opts ...Option) *RedisClusterGroup {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: RedisCluster(%d): need at least 1", n)
	}
	Require(t, KindRedis)
	bin, _ := lookBinary("redis-server")
	cfg := newConfig(redisTimeout, opts)
	f := newFixture(t)
	g := &RedisClusterGroup{timeout: cfg.startTimeout}
	var busPorts []int
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		busPorts = nil
		return g.build(n, func(i int) (*RedisServer, error) {
			bus, err := freePorts(1)
			if err != nil {
				return nil, err
			}
			busPorts = append(busPorts, bus[0])
			p, err := newRedisProcess(f, fmt.Sprintf("redis-cluster[%d]", i), func(dir string, port int) []string {
				return redisArgs(bin, port, dir, append([]string{
					"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus[0]),
					"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
					"--cluster-node-timeout", "2000",
				}, cfg.args...)...)
			})
			return &RedisServer{p}, err
		})
	}, func() error {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		for i, node := range g.nodes {
			if _, err := node.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
				return fmt.Errorf("testserver: %s: CLUSTER SET-CONFIG-EPOCH: %w", node.name, err)
			}
			lo, hi := i*16384/n, (i+1)*16384/n-1
			if _, err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
				return fmt.Errorf("testserver: %s: CLUSTER ADDSLOTSRANGE: %w", node.name, err)
			}
		}
		for i := 1; i < n; i++ {
			if _, err := g.nodes[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1",
				strconv.Itoa(g.nodes[i].Port()), strconv.Itoa(busPorts[i])); err != nil {
				return fmt.Errorf("testserver: CLUSTER MEET %s: %w", g.nodes[i].Addr(), err)
			}
		}
		return g.WaitOK(cfg.startTimeout)
	})
	return g
}

// SentinelGroup is a Redis primary, one replica and one Sentinel monitoring
// them under the master name "mymaster" (quorum 1).
type SentinelGroup struct {
	master, replica, sentinel *RedisServer
	timeout                   time.Duration
}

// MasterName returns the name the Sentinel monitors the master under.
func (g *SentinelGroup) MasterName() string { return "mymaster" }

// Master returns the server started as the master (after a failover it may
// no longer be the master; see CurrentMaster).
func (g *SentinelGroup) Master() *RedisServer { return g.master }

// Replica returns the server started as the replica.
func (g *SentinelGroup) Replica() *RedisServer { return g.replica }

// Sentinel returns the Sentinel process (a redis-server in sentinel mode).
func (g *SentinelGroup) Sentinel() *RedisServer { return g.sentinel }

// SentinelAddrs returns the Sentinel addresses, for a failover client.
func (g *SentinelGroup) SentinelAddrs() []string { return []string{g.sentinel.Addr()} }

// Nodes returns the data nodes: the initial master and the replica.
func (g *SentinelGroup) Nodes() []*RedisServer { return []*RedisServer{g.master, g.replica} }

// Node returns the data node with the given address ("host:port"), or nil.
func (g *SentinelGroup) Node(addr string) *RedisServer {
	for _, n := range g.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// CurrentMaster asks the Sentinel for the current master's address.
func (g *SentinelGroup) CurrentMaster() (string, error) {
	ctx, cancel := ctxTimeout(2 * time.Second)
	defer cancel()
	v, err := g.sentinel.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.MasterName())
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("testserver: sentinel get-master-addr-by-name: got %v", v)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// WaitFailover waits until the Sentinel names a master other than from, for
// at most timeout, and returns the new master's address.
func (g *SentinelGroup) WaitFailover(from string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := g.CurrentMaster()
		if err == nil && m != from {
			return m, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("testserver: no failover from %s within %v (last: %q, %v)", from, timeout, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLinked waits until the replica is linked to the master and the
// Sentinel knows the replica and has its quorum.
func (g *SentinelGroup) waitLinked(timeout time.Duration) error {
	if err := waitFor(timeout, 20*time.Millisecond, g.linked); err != nil {
		return fmt.Errorf("testserver: redis sentinel setup not ready: %w", err)
	}
	return nil
}

// waitFor polls check every interval until it returns nil, for at most
// timeout.
func waitFor(timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

func (g *SentinelGroup) replicaLinked() error {
	ctx, cancel := ctxTimeout(time.Second)
	defer cancel()
	v, err := g.replica.Do(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	if s, _ := v.(string); infoField(s, "master_link_status") != "up" {
		return errors.New("replica: master_link_status not up")
	}
	return nil
}

func (g *SentinelGroup) linked() error {
	if err := g.replicaLinked(); err != nil {
		return err
	}
	ctx, cancel := ctxTimeout(time.Second)
	defer cancel()
	v, err := g.sentinel.Do(ctx, "SENTINEL", "REPLICAS", g.MasterName())
	if err != nil {
		return err
	}
	found := false
	reps, _ := v.([]any)
	for _, r := range reps {
		fields, _ := r.([]any)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "name" && fields[i+1] == g.replica.Addr() {
				found = true
			}
		}
	}
	if !found {
		return errors.New("sentinel does not list the replica yet")
	}
	v, err = g.sentinel.Do(ctx, "SENTINEL", "CKQUORUM", g.MasterName())
	if err != nil {
		return err
	}
	if s, _ := v.(string); !strings.HasPrefix(s, "OK") {
		return fmt.Errorf("sentinel ckquorum: %v", v)
	}
	return nil
}

// RedisSentinel starts a master, a replica of it and a Sentinel that
// monitors them as "mymaster" (quorum 1, down-after 2 s unless
// WithSentinelDownAfter, failover-timeout 10 s), and waits until the replica
// is linked and the Sentinel knows it. WithArgs applies to the data nodes.
func RedisSentinel(t T, opts ...Option) *SentinelGroup {
	t.Helper()
	Require(t, KindRedis)
	bin, _ := lookBinary("redis-server")
	cfg := newConfig(redisTimeout, opts)
	f := newFixture(t)
	g := &SentinelGroup{timeout: cfg.startTimeout}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		m, err := newRedisProcess(f, "redis-master", func(dir string, port int) []string {
			return redisArgs(bin, port, dir, cfg.args...)
		})
		if err != nil {
			return nil, err
		}
		r, err := newRedisProcess(f, "redis-replica", func(dir string, port int) []string {
			return redisArgs(bin, port, dir, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(m.Port())}, cfg.args...)...)
		})
		if err != nil {
			return nil, err
		}
		var werr error
		s, err := newRedisProcess(f, "redis-sentinel", func(dir string, port int) []string {
			conf := filepath.Join(dir, "sentinel.conf")
			werr = os.WriteFile(conf, []byte(fmt.Sprintf(
				"port %d\nbind 127.0.0.1\ndir %s\ndaemonize no\n"+
					"sentinel monitor mymaster 127.0.0.1 %d 1\n"+
					"sentinel down-after-milliseconds mymaster %d\n"+
					"sentinel failover-timeout mymaster 10000\n",
				port, dir, m.Port(), cfg.sentinelDownAfter.Milliseconds())), 0o644)
			return []string{bin, conf, "--sentinel"}
		})
		if err != nil {
			return nil, err
		}
		if werr != nil {
			return nil, fmt.Errorf("testserver: sentinel.conf: %w", werr)
		}
		g.master, g.replica, g.sentinel = &RedisServer{m}, &RedisServer{r}, &RedisServer{s}
		// The Sentinel starts once the replica is linked: it learns of
		// replicas from INFO on the master, which it repeats only every 10 s.
		s.timeout = cfg.startTimeout
		f.add(s)
		return []*Process{m, r}, nil
	}, func() error {
		if err := waitFor(cfg.startTimeout, 20*time.Millisecond, g.replicaLinked); err != nil {
			return fmt.Errorf("testserver: redis replica not linked: %w", err)
		}
		if err := g.sentinel.Start(); err != nil {
			return err
		}
		if err := g.sentinel.WaitReady(); err != nil {
			return err
		}
		return g.waitLinked(cfg.startTimeout)
	})
	return g
}

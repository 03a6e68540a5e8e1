package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const zkTimeout = 30 * time.Second

// zkJar is where Debian's zookeeper package installs the server jar.
var zkJar = "/usr/share/java/zookeeper.jar"

// zkClassPath returns the class path for the ZooKeeper server: the jar (its
// manifest pulls in the dependencies) and an slf4j binding, slf4j-simple
// (logs on stderr, which goes to the log file) or else slf4j-nop.
func zkClassPath() (string, error) {
	if _, err := os.Stat(zkJar); err != nil {
		return "", fmt.Errorf("%s not found: apt-get install zookeeper", zkJar)
	}
	cp := zkJar
	dir := filepath.Dir(zkJar)
	for _, b := range []string{"slf4j-simple.jar", "slf4j-nop.jar"} {
		if p := filepath.Join(dir, b); isFile(p) {
			cp += ":" + p
			break
		}
	}
	return cp, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// fourLetter sends a ZooKeeper four-letter command ("srvr", "mntr", "cons",
// ...) and returns the whole answer. ctx bounds the exchange: a probe made
// while the server starts can hang with the socket open.
func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), err
	}
	return string(b), nil
}

// zkMode extracts the Mode from a srvr answer.
func zkMode(srvr string) (string, error) {
	for _, l := range strings.Split(srvr, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "Mode: "); ok {
			return m, nil
		}
	}
	if strings.Contains(srvr, "not currently serving") {
		return "", errors.New("zookeeper: not currently serving requests")
	}
	return "", fmt.Errorf("zookeeper: no Mode in srvr answer %q", srvr)
}

// ZooKeeperServer is a ZooKeeper server (QuorumPeerMain in a JVM). Its data
// directory survives Kill and Restart, and so do sessions and their ephemeral
// nodes until the sessions expire.
type ZooKeeperServer struct {
	*Process
}

// FourLetter sends a four-letter command ("srvr", "mntr", "cons", "conf",
// ...; all are whitelisted) and returns the answer, with a 2 s deadline.
func (s *ZooKeeperServer) FourLetter(cmd string) (string, error) {
	ctx, cancel := ctxTimeout(2 * time.Second)
	defer cancel()
	return fourLetter(ctx, s.Addr(), cmd)
}

// Mode returns the server's Mode from srvr: "standalone", "leader",
// "follower" or "observer". It fails when the server is not serving (for
// example without quorum).
func (s *ZooKeeperServer) Mode() (string, error) {
	out, err := s.FourLetter("srvr")
	if err != nil {
		return "", err
	}
	return zkMode(out)
}

// ZooKeeperGroup is a ZooKeeper ensemble.
type ZooKeeperGroup struct {
	quorumGroup[*ZooKeeperServer]
}

// Node returns the i-th server (from 0; its myid is i+1).
func (g *ZooKeeperGroup) Node(i int) *ZooKeeperServer { return g.nodes[i] }

// Nodes returns all servers.
func (g *ZooKeeperGroup) Nodes() []*ZooKeeperServer {
	return append([]*ZooKeeperServer(nil), g.nodes...)
}

// ConnectString returns the client addresses joined with commas.
func (g *ZooKeeperGroup) ConnectString() string { return strings.Join(g.Addrs(), ",") }

// Leader returns the index of the running node that reports Mode leader (or
// standalone), or an error if there is none.
func (g *ZooKeeperGroup) Leader() (int, error) {
	return g.leader(func(n *ZooKeeperServer) (bool, error) {
		m, err := n.Mode()
		return m == "leader" || m == "standalone", err
	})
}

// WaitLeader waits until a running node is leader and every running node
// serves (leader or follower), for at most timeout (0 means the start
// timeout), and returns the leader's index.
func (g *ZooKeeperGroup) WaitLeader(timeout time.Duration) (int, error) {
	return g.waitLeader(timeout, "zookeeper ensemble not serving", g.serving)
}

func (g *ZooKeeperGroup) serving() (int, error) {
	return g.soleLeader("no leader", func(ctx context.Context, _ int, n *ZooKeeperServer) (bool, error) {
		out, err := fourLetter(ctx, n.Addr(), "srvr")
		if err != nil {
			return false, err
		}
		m, err := zkMode(out)
		return m == "leader" || m == "standalone", err
	})
}

// ZooKeeper starts a standalone ZooKeeper server (tickTime 200 ms, session
// timeouts clamped to [400 ms, 30 s], all four-letter commands allowed,
// container check interval 500 ms) and waits until srvr reports Mode
// standalone. Options: WithJVMProperty, WithZooConfig, WithArgs (JVM
// arguments), WithStartTimeout.
func ZooKeeper(t T, opts ...Option) *ZooKeeperServer {
	t.Helper()
	return zkStart(t, 1, true, opts).nodes[0]
}

// ZooKeeperEnsemble starts an ensemble of n ZooKeeper servers (each with its
// client, quorum and election port) and waits until one is leader and the
// others are followers. The options are those of ZooKeeper and apply to every
// node.
func ZooKeeperEnsemble(t T, n int, opts ...Option) *ZooKeeperGroup {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: ZooKeeperEnsemble(%d): need at least 1", n)
	}
	return zkStart(t, n, false, opts)
}

func zkStart(t T, n int, standalone bool, opts []Option) *ZooKeeperGroup {
	t.Helper()
	Require(t, KindZooKeeper)
	java, _ := lookBinary("java")
	cp, _ := zkClassPath()
	cfg := newConfig(zkTimeout, opts)
	lab := isolation(t, KindZooKeeper, cfg, n)
	f := newFixture(t)
	g := &ZooKeeperGroup{quorumGroup[*ZooKeeperServer]{kind: "zookeeper", timeout: cfg.startTimeout, lab: lab}}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		ports, err := freePorts(3 * n)
		if err != nil {
			return nil, err
		}
		e := &zkEnsemble{cfg: cfg, java: java, cp: cp, lab: lab, ports: ports,
			host: func(int) string { return "127.0.0.1" }}
		if lab != nil {
			// A namespace of its own per node: the usual ports, each on
			// its node's address.
			e.host = lab.addr
			for i := range ports {
				ports[i] = []int{2181, 2888, 3888}[i%3]
			}
		}
		if !standalone {
			for i := 0; i < n; i++ {
				e.servers = append(e.servers, fmt.Sprintf("server.%d=%s:%d:%d", i+1, e.host(i), ports[3*i+1], ports[3*i+2]))
			}
		}
		return g.build(n, func(i int) (*ZooKeeperServer, error) {
			p, err := e.process(f, i)
			return &ZooKeeperServer{p}, err
		})
	}, nil)
	return g
}

// zkEnsemble is the layout of one launch attempt: node i has the client,
// quorum and election ports ports[3i:3i+3] on address host(i); servers are
// the server.N lines (none for a standalone server).
type zkEnsemble struct {
	cfg      *config
	java, cp string
	lab      *netLab
	ports    []int
	host     func(int) string
	servers  []string
}

// process writes node i's directory and configuration and returns its
// process, not started.
func (e *zkEnsemble) process(f *fixture, i int) (*Process, error) {
	dir, err := f.tempDir("zk")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	name := "zookeeper"
	if e.servers != nil {
		name = fmt.Sprintf("zookeeper[%d]", i)
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(dir, "zoo.cfg")
	zooCfg := append([][2]string{{"clientPortAddress", e.host(i)}}, e.cfg.zooCfg...)
	if err := os.WriteFile(conf, []byte(zooConfig(data, e.ports[3*i], e.servers, zooCfg)), 0o644); err != nil {
		return nil, err
	}
	args := []string{e.java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Xms32m", "-Xmx256m", "-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"}
	args = append(args, jvmProps(append([][2]string{{"znode.container.checkIntervalMs", "500"}}, e.cfg.jvmProps...))...)
	args = append(args, e.cfg.args...)
	args = append(args, "-cp", e.cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", conf)
	addr := net.JoinHostPort(e.host(i), strconv.Itoa(e.ports[3*i]))
	if e.lab != nil {
		args = e.lab.exec(i, args)
	}
	p := newProcess(name, dir, addr, args)
	p.ready = func(ctx context.Context) error {
		out, err := fourLetter(ctx, addr, "srvr")
		if err != nil {
			return err
		}
		_, err = zkMode(out)
		return err
	}
	return p, nil
}

// jvmProps returns -Dkey=value arguments; a later value of a key replaces
// an earlier one in its place.
func jvmProps(props [][2]string) []string {
	seen := map[string]int{}
	var out []string
	for _, kv := range props {
		a := "-D" + kv[0] + "=" + kv[1]
		if j, ok := seen[kv[0]]; ok {
			out[j] = a
			continue
		}
		seen[kv[0]] = len(out)
		out = append(out, a)
	}
	return out
}

func zooConfig(dataDir string, clientPort int, servers []string, overrides [][2]string) string {
	kv := [][2]string{
		{"tickTime", "200"},
		{"initLimit", "25"},
		{"syncLimit", "10"},
		{"dataDir", dataDir},
		{"clientPort", strconv.Itoa(clientPort)},
		{"clientPortAddress", "127.0.0.1"},
		{"admin.enableServer", "false"},
		{"4lw.commands.whitelist", "*"},
		{"minSessionTimeout", "400"},
		{"maxSessionTimeout", "30000"},
		// Every client is on 127.0.0.1: the default limit of 60
		// connections per address turns away the 64 contenders of a
		// benchmark.
		{"maxClientCnxns", "0"},
	}
	for _, o := range overrides {
		replaced := false
		for i := range kv {
			if kv[i][0] == o[0] {
				kv[i][1], replaced = o[1], true
			}
		}
		if !replaced {
			kv = append(kv, o)
		}
	}
	var b strings.Builder
	for _, e := range kv {
		fmt.Fprintf(&b, "%s=%s\n", e[0], e[1])
	}
	for _, s := range servers {
		b.WriteString(s + "\n")
	}
	return b.String()
}

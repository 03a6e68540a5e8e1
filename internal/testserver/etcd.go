package testserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const etcdTimeout = 30 * time.Second

// etcdHTTP does one HTTP/1.1 exchange with an etcd client port on its own
// connection (no http.Client: no pooled connections or goroutines are left
// behind).
func etcdHTTP(ctx context.Context, addr, method, path string, body []byte) ([]byte, error) {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req, err := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Close = true
	if err := req.Write(c); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func etcdHealth(ctx context.Context, addr string) error {
	b, err := etcdHTTP(ctx, addr, "GET", "/health", nil)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("/health: %w: %s", err, b)
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %s", b)
	}
	return nil
}

// EtcdStatus is a member's answer to the maintenance Status call.
type EtcdStatus struct {
	MemberID uint64 // this member's ID
	Leader   uint64 // the member ID of the leader it knows, 0 if none
	RaftTerm uint64
	Version  string
}

// jsonUint decodes a uint64 that the gRPC gateway writes as a string.
type jsonUint uint64

func (u *jsonUint) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*u = 0
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	*u = jsonUint(n)
	return err
}

func etcdStatus(ctx context.Context, addr string) (EtcdStatus, error) {
	b, err := etcdHTTP(ctx, addr, "POST", "/v3/maintenance/status", []byte("{}"))
	if err != nil {
		return EtcdStatus{}, err
	}
	var st struct {
		Header struct {
			MemberID jsonUint `json:"member_id"`
		} `json:"header"`
		Leader   jsonUint `json:"leader"`
		RaftTerm jsonUint `json:"raftTerm"`
		Version  string   `json:"version"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return EtcdStatus{}, fmt.Errorf("status: %w: %s", err, b)
	}
	return EtcdStatus{MemberID: uint64(st.Header.MemberID), Leader: uint64(st.Leader),
		RaftTerm: uint64(st.RaftTerm), Version: st.Version}, nil
}

// EtcdServer is an etcd member. Its data directory survives Kill and
// Restart.
type EtcdServer struct {
	*Process
	peerAddr string
}

// Endpoint returns the client URL, "http://127.0.0.1:port".
func (s *EtcdServer) Endpoint() string { return "http://" + s.Addr() }

// PeerAddr returns the member's peer (raft) address.
func (s *EtcdServer) PeerAddr() string { return s.peerAddr }

// Status asks the member for its status through the HTTP gateway
// (/v3/maintenance/status), with a 2 s deadline.
func (s *EtcdServer) Status() (EtcdStatus, error) {
	ctx, cancel := ctxTimeout(2 * time.Second)
	defer cancel()
	return etcdStatus(ctx, s.Addr())
}

// IsLeader reports whether the member considers itself the raft leader.
func (s *EtcdServer) IsLeader() (bool, error) {
	st, err := s.Status()
	if err != nil {
		return false, err
	}
	return st.Leader != 0 && st.Leader == st.MemberID, nil
}

// EtcdGroup is an etcd cluster.
type EtcdGroup struct {
	quorumGroup[*EtcdServer]
}

// Node returns the i-th member (from 0; its name is n<i+1>).
func (g *EtcdGroup) Node(i int) *EtcdServer { return g.nodes[i] }

// Nodes returns all members.
func (g *EtcdGroup) Nodes() []*EtcdServer { return append([]*EtcdServer(nil), g.nodes...) }

// Endpoints returns the client URLs ("http://127.0.0.1:port") in node order.
func (g *EtcdGroup) Endpoints() []string {
	out := make([]string, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = n.Endpoint()
	}
	return out
}

// Leader returns the index of the running member that reports itself as
// leader, or an error if there is none.
func (g *EtcdGroup) Leader() (int, error) {
	return g.leader((*EtcdServer).IsLeader)
}

// WaitLeader waits until every running member is healthy and agrees on a
// leader among them, for at most timeout (0 means the start timeout), and
// returns the leader's index.
func (g *EtcdGroup) WaitLeader(timeout time.Duration) (int, error) {
	return g.waitLeader(timeout, "etcd cluster has no leader", g.agreedLeader)
}

func (g *EtcdGroup) agreedLeader() (int, error) {
	var leaderID uint64
	return g.soleLeader("the leader is not among the running members", func(ctx context.Context, _ int, n *EtcdServer) (bool, error) {
		err := etcdHealth(ctx, n.Addr())
		var st EtcdStatus
		if err == nil {
			st, err = etcdStatus(ctx, n.Addr())
		}
		if err != nil {
			return false, err
		}
		if st.Leader == 0 || (leaderID != 0 && st.Leader != leaderID) {
			return false, fmt.Errorf("leader %x, others say %x", st.Leader, leaderID)
		}
		leaderID = st.Leader
		return st.MemberID == st.Leader, nil
	})
}

// Etcd starts a single etcd member and waits until /health reports true.
// Options: WithArgs (for example "--election-timeout", "500",
// "--heartbeat-interval", "50" for faster elections and a 1 s lease floor),
// WithStartTimeout.
func Etcd(t T, opts ...Option) *EtcdServer {
	t.Helper()
	return etcdStart(t, 1, true, opts).nodes[0]
}

// EtcdCluster starts an etcd cluster of n members and waits until all are
// healthy. At the end of the test the members are killed with SIGKILL
// (SIGTERM to all members at once makes the leader linger for seconds).
func EtcdCluster(t T, n int, opts ...Option) *EtcdGroup {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: EtcdCluster(%d): need at least 1", n)
	}
	return etcdStart(t, n, false, opts)
}

func etcdStart(t T, n int, single bool, opts []Option) *EtcdGroup {
	t.Helper()
	Require(t, KindEtcd)
	bin, _ := lookBinary("etcd")
	cfg := newConfig(etcdTimeout, opts)
	lab := isolation(t, KindEtcd, cfg, n)
	f := newFixture(t)
	g := &EtcdGroup{quorumGroup[*EtcdServer]{kind: "etcd", timeout: cfg.startTimeout, lab: lab}}
	f.launch(cfg.startTimeout, func() ([]*Process, error) {
		ports, err := freePorts(2 * n)
		if err != nil {
			return nil, err
		}
		var tok [8]byte
		_, _ = rand.Read(tok[:])
		token := "dlock-test-" + hex.EncodeToString(tok[:])
		hostPort := func(i, port int) string { return loopback(port) }
		if lab != nil {
			// A namespace of its own per member: the usual ports, each on
			// its member's address.
			hostPort = func(i, port int) string { return net.JoinHostPort(lab.addr(i), strconv.Itoa(port)) }
			for i := range ports {
				ports[i] = 2379 + i%2
			}
		}
		var initial []string
		for i := 0; i < n; i++ {
			initial = append(initial, fmt.Sprintf("n%d=http://%s", i+1, hostPort(i, ports[2*i+1])))
		}
		return g.build(n, func(i int) (*EtcdServer, error) {
			dir, err := f.tempDir("etcd")
			if err != nil {
				return nil, err
			}
			client, peer := "http://"+hostPort(i, ports[2*i]), "http://"+hostPort(i, ports[2*i+1])
			args := append([]string{bin,
				"--name", fmt.Sprintf("n%d", i+1),
				"--data-dir", filepath.Join(dir, "data"),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", token,
				"--logger", "zap", "--log-outputs", "stderr",
			}, cfg.args...)
			addr := hostPort(i, ports[2*i])
			if lab != nil {
				args = lab.exec(i, args)
			}
			name := fmt.Sprintf("etcd[%d]", i)
			if single {
				name = "etcd"
			}
			p := newProcess(name, dir, addr, args)
			p.probeTimeout = 2 * time.Second
			p.ready = func(ctx context.Context) error { return etcdHealth(ctx, addr) }
			return &EtcdServer{Process: p, peerAddr: hostPort(i, ports[2*i+1])}, nil
		})
	}, nil)
	return g
}

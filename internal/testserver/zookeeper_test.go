package testserver

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// zkClient is a minimal ZooKeeper client speaking the jute protocol, enough
// to create a node and check that it exists.
type zkClient struct {
	c   net.Conn
	r   *bufio.Reader
	xid int32
}

func zkDial(t *testing.T, addr string) *zkClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	z := &zkClient{c: c, r: bufio.NewReader(c)}
	var b []byte
	b = binary.BigEndian.AppendUint32(b, 0)    // protocol version
	b = binary.BigEndian.AppendUint64(b, 0)    // last zxid seen
	b = binary.BigEndian.AppendUint32(b, 4000) // session timeout
	b = binary.BigEndian.AppendUint64(b, 0)    // session id
	b = binary.BigEndian.AppendUint32(b, 16)   // password
	b = append(b, make([]byte, 16)...)
	b = append(b, 0) // read-only
	if err := z.send(b); err != nil {
		t.Fatal(err)
	}
	resp, err := z.recv()
	if err != nil {
		t.Fatalf("zk connect: %v", err)
	}
	if len(resp) < 16 || binary.BigEndian.Uint64(resp[8:]) == 0 {
		t.Fatalf("zk connect: bad response %x", resp)
	}
	t.Cleanup(func() { c.Close() })
	return z
}

func (z *zkClient) send(b []byte) error {
	_, err := z.c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	if err == nil {
		_, err = z.c.Write(b)
	}
	return err
}

func (z *zkClient) recv() ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(z.r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(z.r, b)
	return b, err
}

func zkString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// call sends a request and returns the ZooKeeper error code of the reply.
func (z *zkClient) call(op int32, body []byte) (int32, error) {
	z.xid++
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(z.xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	if err := z.send(append(b, body...)); err != nil {
		return 0, err
	}
	for {
		resp, err := z.recv()
		if err != nil {
			return 0, err
		}
		if len(resp) < 16 {
			return 0, fmt.Errorf("short reply %x", resp)
		}
		if int32(binary.BigEndian.Uint32(resp)) != z.xid {
			continue // watch events, pings
		}
		return int32(binary.BigEndian.Uint32(resp[12:])), nil
	}
}

func (z *zkClient) create(path, data string) (int32, error) {
	var b []byte
	b = zkString(b, path)
	b = zkString(b, data)
	b = binary.BigEndian.AppendUint32(b, 1)  // one ACL
	b = binary.BigEndian.AppendUint32(b, 31) // all permissions
	b = zkString(b, "world")
	b = zkString(b, "anyone")
	b = binary.BigEndian.AppendUint32(b, 0) // persistent
	return z.call(1, b)
}

func (z *zkClient) exists(path string) (bool, error) {
	code, err := z.call(3, append(zkString(nil, path), 0))
	if err != nil {
		return false, err
	}
	switch code {
	case 0:
		return true, nil
	case -101:
		return false, nil
	}
	return false, fmt.Errorf("exists %s: zk error %d", path, code)
}

func TestZooKeeperKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := ZooKeeper(t, WithJVMProperty("znode.container.checkIntervalMs", "700"))
	t.Logf("zookeeper ready in %v at %s", time.Since(start), s.Addr())
	if m, err := s.Mode(); err != nil || m != "standalone" {
		t.Fatalf("Mode = %q, %v", m, err)
	}
	conf, err := s.FourLetter("conf")
	if err != nil || !strings.Contains(conf, "maxSessionTimeout=30000") {
		t.Fatalf("conf: %v\n%s", err, conf)
	}
	if !strings.Contains(s.Log(), "checkIntervalMs=700") {
		t.Errorf("JVM property not in effect; log:\n%s", s.Log())
	}
	z := zkDial(t, s.Addr())
	if code, err := z.create("/dlock-test", "x"); err != nil || code != 0 {
		t.Fatalf("create: %d %v", code, err)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("zookeeper restarted in %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	z = zkDial(t, s.Addr())
	if ok, err := z.exists("/dlock-test"); err != nil || !ok {
		t.Fatalf("node after restart: %v %v", ok, err)
	}
	if ok, err := z.exists("/nope"); err != nil || ok {
		t.Fatalf("exists(/nope) = %v %v", ok, err)
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := ZooKeeperEnsemble(t, 3)
	t.Logf("zookeeper ensemble ready in %v at %s", time.Since(start), g.ConnectString())
	modes := map[string]int{}
	for _, n := range g.Nodes() {
		m, err := n.Mode()
		if err != nil {
			t.Fatal(err)
		}
		modes[m]++
	}
	if modes["leader"] != 1 || modes["follower"] != 2 {
		t.Fatalf("modes %v, want 1 leader and 2 followers", modes)
	}
	leader, err := g.Leader()
	if err != nil {
		t.Fatal(err)
	}
	z := zkDial(t, g.Node((leader+1)%3).Addr())
	if code, err := z.create("/replicated", ""); err != nil || code != 0 {
		t.Fatalf("create: %d %v", code, err)
	}
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
		t.Fatalf("the killed node %d is still the leader", leader)
	}
	if err := g.Node(leader).Restart(); err != nil {
		t.Fatal(err)
	}
	if m, err := g.Node(leader).Mode(); err != nil || m != "follower" {
		t.Fatalf("restarted old leader: mode %q %v, want follower", m, err)
	}
	z = zkDial(t, g.Node(leader).Addr())
	if ok, err := z.exists("/replicated"); err != nil || !ok {
		t.Fatalf("node on the restarted server: %v %v", ok, err)
	}
}

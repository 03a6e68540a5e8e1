package testserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrNotIsolated is returned by Cut and Heal of a group started without
// WithIsolation.
var ErrNotIsolated = errors.New("testserver: the group was not started WithIsolation: it has no network of its own to cut")

// WithIsolation starts each member of a ZooKeeper ensemble or etcd cluster
// in a Linux network namespace of its own, joined to the others and to the
// test's host by a bridge (each member has its own address, 10.x.y.11,
// .12, ...). The group's Cut then cuts a member off from the other members
// and from every client, both ways, and Heal joins it again. It needs root
// and iproute2's ip (see CanIsolate); without them the test is ended
// through Unavailable.
func WithIsolation() Option {
	return func(c *config) { c.isolate = true }
}

var (
	isolateOnce sync.Once
	isolateErr  error
)

// CanIsolate returns nil if WithIsolation can work here: Linux, root, and
// an ip command that can create a network namespace (it makes and removes
// one to see). Otherwise the error says what is missing.
func CanIsolate() error {
	isolateOnce.Do(func() {
		if runtime.GOOS != "linux" {
			isolateErr = fmt.Errorf("network namespaces are Linux only, not %s", runtime.GOOS)
			return
		}
		if os.Geteuid() != 0 {
			isolateErr = fmt.Errorf("network namespaces need root (euid %d)", os.Geteuid())
			return
		}
		ip, err := lookBinary("ip")
		if err != nil {
			isolateErr = errors.New("ip not found: apt-get install iproute2")
			return
		}
		name := fmt.Sprintf("dlock-%d-probe", os.Getpid())
		if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
			isolateErr = fmt.Errorf("ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
			return
		}
		_ = exec.Command(ip, "netns", "del", name).Run()
	})
	return isolateErr
}

// netLab is a bridge on the host with one network namespace per member,
// each joined to it by a veth pair. Names carry the creating process's pid
// (namespaces "dlock-<pid>-<id>-<i>", the bridge's alias "dlock-<pid>") so
// that a later lab removes what a killed process left behind.
type netLab struct {
	ip     string
	bridge string   // on the host
	subnet string   // "10.a.b"
	ns     []string // one per member
	hostIf []string // the host's end of each member's veth pair

	mu  sync.Mutex
	cut []bool
}

// newNetLab makes the bridge and n namespaces. On error it removes what it
// made.
func newNetLab(n int) (l *netLab, err error) {
	if err := CanIsolate(); err != nil {
		return nil, err
	}
	ip, _ := lookBinary("ip")
	sweepNetLabs(ip)
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	subnet, err := freeSubnet(ip)
	if err != nil {
		return nil, err
	}
	l = &netLab{ip: ip, bridge: "dlk" + id, subnet: subnet, cut: make([]bool, n)}
	defer func() {
		if err != nil {
			l.close()
			l = nil
		}
	}()
	pid := strconv.Itoa(os.Getpid())
	// forward_delay 0: a port that comes back up (Heal) forwards at once.
	if err := l.run("link", "add", l.bridge, "type", "bridge", "forward_delay", "0"); err != nil {
		return nil, err
	}
	if err := l.run("link", "set", l.bridge, "alias", "dlock-"+pid); err != nil {
		return nil, err
	}
	if err := l.run("addr", "add", subnet+".1/24", "dev", l.bridge); err != nil {
		return nil, err
	}
	if err := l.run("link", "set", l.bridge, "up"); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("dlock-%s-%s-%d", pid, id, i)
		host := fmt.Sprintf("dlk%s%d", id, i)
		if err := l.run("netns", "add", ns); err != nil {
			return nil, err
		}
		l.ns = append(l.ns, ns)
		for _, args := range [][]string{
			{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", host, "master", l.bridge, "up"},
			{"-n", ns, "addr", "add", l.addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := l.run(args...); err != nil {
				return nil, err
			}
		}
		l.hostIf = append(l.hostIf, host)
	}
	return l, nil
}

// addr returns member i's address.
func (l *netLab) addr(i int) string { return fmt.Sprintf("%s.%d", l.subnet, 11+i) }

// exec prefixes a command line so that it runs in member i's namespace
// (ip netns exec execs the command in place: its pid is the server's).
func (l *netLab) exec(i int, args []string) []string {
	return append([]string{l.ip, "netns", "exec", l.ns[i]}, args...)
}

func (l *netLab) run(args ...string) error {
	out, err := exec.Command(l.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testserver: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setCut takes member i's link down (cut) or up (heal). With the host's
// end down the bridge drops everything to and from the member: packets
// vanish, connections stall, as in a partition.
func (l *netLab) setCut(i int, cut bool) error {
	if l == nil {
		return ErrNotIsolated
	}
	if i < 0 || i >= len(l.hostIf) {
		return fmt.Errorf("testserver: no member %d", i)
	}
	state := "up"
	if cut {
		state = "down"
	}
	if err := l.run("link", "set", l.hostIf[i], state); err != nil {
		return err
	}
	l.mu.Lock()
	l.cut[i] = cut
	l.mu.Unlock()
	return nil
}

// isCut reports whether member i is cut off (false without a lab).
func (l *netLab) isCut(i int) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut[i]
}

// close removes the namespaces (and with them the veth pairs) and the
// bridge. The members' processes must have exited.
func (l *netLab) close() {
	for _, ns := range l.ns {
		_ = exec.Command(l.ip, "netns", "del", ns).Run()
	}
	_ = exec.Command(l.ip, "link", "del", l.bridge).Run()
}

// sweepNetLabs removes the namespaces and bridges of labs whose process
// is gone (killed before its clean-up ran).
func sweepNetLabs(ip string) {
	out, _ := exec.Command(ip, "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if pid, ok := labPID(f[0]); ok && !alive(pid) {
			_ = exec.Command(ip, "netns", "del", f[0]).Run()
		}
	}
	out, _ = exec.Command(ip, "-o", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "dlk") {
			continue
		}
		for j := 2; j+1 < len(f); j++ {
			if f[j] != "alias" {
				continue
			}
			if pid, ok := labPID(f[j+1]); ok && !alive(pid) {
				_ = exec.Command(ip, "link", "del", strings.TrimSuffix(f[1], ":")).Run()
			}
		}
	}
}

// labPID parses the pid of "dlock-<pid>[-...]".
func labPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "dlock-")
	if !ok {
		return 0, false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// freeSubnet picks a random 10.a.b.0/24 that no address or route of the
// host uses.
func freeSubnet(ip string) (string, error) {
	out, err := exec.Command(ip, "-4", "-o", "addr").Output()
	if err != nil {
		return "", fmt.Errorf("testserver: ip addr: %w", err)
	}
	routes, _ := exec.Command(ip, "-4", "route").Output()
	used := strings.Fields(string(out) + " " + string(routes))
	for range 64 {
		a, _ := rand.Int(rand.Reader, big.NewInt(55))
		b, _ := rand.Int(rand.Reader, big.NewInt(256))
		s := fmt.Sprintf("10.%d.%d", 200+a.Int64(), b.Int64())
		if !slices.ContainsFunc(used, func(f string) bool { return strings.HasPrefix(f, s+".") }) {
			return s, nil
		}
	}
	return "", errors.New("testserver: no free 10.x.y.0/24 subnet")
}

// isolation makes the lab of a group started WithIsolation, before its
// fixture so that its clean-up runs after the members are gone.
func isolation(t T, kind Kind, cfg *config, n int) *netLab {
	t.Helper()
	if !cfg.isolate {
		return nil
	}
	if err := CanIsolate(); err != nil {
		Unavailable(t, kind, "WithIsolation: %v", err)
		return nil
	}
	l, err := newNetLab(n)
	if err != nil {
		t.Fatalf("testserver: WithIsolation: %v", err)
		return nil
	}
	t.Cleanup(l.close)
	return l
}

package testserver

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// cutGroup is what the cut test needs of an ensemble.
type cutGroup interface {
	Len() int
	Cut(i int) error
	Heal(i int) error
	WaitLeader(timeout time.Duration) (int, error)
}

// TestCutLeader cuts the leader of a 3-node ensemble off the network: the
// other two elect a new leader; after Heal the old leader serves again, as
// a follower of the new one.
func TestCutLeader(t *testing.T) {
	if err := CanIsolate(); err != nil {
		// A property of the host (root, network namespaces), not a
		// missing server: DLOCK_TEST_REQUIRE does not apply.
		t.Skip(err)
	}
	for _, tc := range []struct {
		name     string
		start    func(t *testing.T) cutGroup
		follower func(g cutGroup, i int) (bool, error)
	}{
		{"zookeeper", func(t *testing.T) cutGroup { return ZooKeeperEnsemble(t, 3, WithIsolation()) },
			func(g cutGroup, i int) (bool, error) {
				m, err := g.(*ZooKeeperGroup).Node(i).Mode()
				return m == "follower", err
			}},
		{"etcd", func(t *testing.T) cutGroup {
			return EtcdCluster(t, 3, WithIsolation(), WithArgs("--election-timeout", "500", "--heartbeat-interval", "50"))
		}, func(g cutGroup, i int) (bool, error) {
			leader, err := g.(*EtcdGroup).Node(i).IsLeader()
			return !leader, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := tc.start(t)
			old, err := g.WaitLeader(0)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Cut(old); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			next, err := g.WaitLeader(20 * time.Second)
			if err != nil {
				t.Fatalf("no new leader after cutting node %d: %v", old, err)
			}
			if next == old {
				t.Fatalf("node %d, cut off, is still the leader", old)
			}
			t.Logf("node %d cut off; node %d leads after %v", old, next, time.Since(cut).Round(time.Millisecond))
			if err := g.Heal(old); err != nil {
				t.Fatal(err)
			}
			if _, err := g.WaitLeader(20 * time.Second); err != nil {
				t.Fatalf("after healing node %d: %v", old, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				ok, err := tc.follower(g, old)
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d, healed, is not a follower: %v", old, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestCutNeedsIsolation: a group started without WithIsolation has no
// network to cut, and says so.
func TestCutNeedsIsolation(t *testing.T) {
	var g EtcdGroup
	if err := g.Cut(0); !errors.Is(err, ErrNotIsolated) {
		t.Fatalf("Cut without isolation: %v, want ErrNotIsolated", err)
	}
	var z ZooKeeperGroup
	if err := z.Heal(0); !errors.Is(err, ErrNotIsolated) {
		t.Fatalf("Heal without isolation: %v, want ErrNotIsolated", err)
	}
}

// TestNetLabCleanUp: closing a lab removes its namespaces and bridge, and a
// lab whose process is gone is swept by the next one.
func TestNetLabCleanUp(t *testing.T) {
	if err := CanIsolate(); err != nil {
		t.Skip(err)
	}
	l, err := newNetLab(2)
	if err != nil {
		t.Fatal(err)
	}
	// Pretend a killed process made it: rename nothing, but give the
	// bridge the alias of a pid that does not exist.
	if err := l.run("link", "set", l.bridge, "alias", "dlock-999999999"); err != nil {
		t.Fatal(err)
	}
	sweepNetLabs(l.ip)
	out, _ := exec.Command(l.ip, "-o", "link", "show", "type", "bridge").Output()
	if strings.Contains(string(out), l.bridge+":") {
		t.Errorf("the bridge of a dead pid was not swept:\n%s", out)
	}
	l.close()
	out, _ = exec.Command(l.ip, "netns", "list").Output()
	for _, ns := range l.ns {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left after close:\n%s", ns, out)
		}
	}
}

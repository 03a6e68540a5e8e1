package testserver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// server is what every server handle has through its *Process.
type server interface {
	Name() string
	Addr() string
	Running() bool
	proc() *Process
}

// group is the part that RedisGroup, RedisClusterGroup, EtcdGroup and
// ZooKeeperGroup share: their servers in node order. Each declares Node and
// Nodes itself, so that its documentation names the server type.
type group[S server] struct {
	nodes []S
}

// Len returns the number of servers.
func (g *group[S]) Len() int { return len(g.nodes) }

// Addrs returns the servers' client addresses ("127.0.0.1:port") in node
// order.
func (g *group[S]) Addrs() []string {
	out := make([]string, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Processes returns the servers' processes in node order, for code that
// faults servers of any kind.
func (g *group[S]) Processes() []*Process {
	out := make([]*Process, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = n.proc()
	}
	return out
}

// quorumGroup is a group that elects a leader (etcd, ZooKeeper) and whose
// nodes can be cut off from each other (WithIsolation).
type quorumGroup[S server] struct {
	group[S]
	kind    string // "etcd" or "zookeeper", for messages
	timeout time.Duration
	lab     *netLab // WithIsolation
}

// Cut cuts node i off from the other nodes and from every client, both
// ways, until Heal; Leader and WaitLeader leave it out meanwhile. It needs
// WithIsolation (else ErrNotIsolated).
func (g *quorumGroup[S]) Cut(i int) error { return g.lab.setCut(i, true) }

// Heal joins node i, cut off by Cut, to the network again.
func (g *quorumGroup[S]) Heal(i int) error { return g.lab.setCut(i, false) }

// live reports whether node i is running and not cut off.
func (g *quorumGroup[S]) live(i int) bool { return g.nodes[i].Running() && !g.lab.isCut(i) }

// probeLive calls probe for every live node in order, each with a 1 s
// deadline, and stops at the first error, which it prefixes with the
// node's name.
func (g *quorumGroup[S]) probeLive(probe func(ctx context.Context, i int, n S) error) error {
	for i, n := range g.nodes {
		if !g.live(i) {
			continue
		}
		ctx, cancel := ctxTimeout(time.Second)
		err := probe(ctx, i, n)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
	}
	return nil
}

// soleLeader probes every live node (see probeLive); probe says whether
// the node is the leader. Two leaders are an error, and so is none (none
// says it).
func (g *quorumGroup[S]) soleLeader(none string, probe func(ctx context.Context, i int, n S) (bool, error)) (int, error) {
	leader := -1
	err := g.probeLive(func(ctx context.Context, i int, n S) error {
		is, err := probe(ctx, i, n)
		if err != nil || !is {
			return err
		}
		if leader >= 0 {
			return fmt.Errorf("two leaders: %d and %d", leader, i)
		}
		leader = i
		return nil
	})
	if err != nil {
		return -1, err
	}
	if leader < 0 {
		return -1, errors.New(none)
	}
	return leader, nil
}

// leader returns the first live node for which isLeader says yes.
func (g *quorumGroup[S]) leader(isLeader func(S) (bool, error)) (int, error) {
	var errs []error
	for i, n := range g.nodes {
		if !g.live(i) {
			continue
		}
		ok, err := isLeader(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
			continue
		}
		if ok {
			return i, nil
		}
	}
	return -1, fmt.Errorf("testserver: no %s leader: %w", g.kind, errors.Join(errs...))
}

// waitLeader polls check until it returns a leader, for at most timeout (0
// means the start timeout); notYet says what failed in the error.
func (g *quorumGroup[S]) waitLeader(timeout time.Duration, notYet string, check func() (int, error)) (int, error) {
	if timeout <= 0 {
		timeout = g.timeout
	}
	leader := -1
	err := waitFor(timeout, 50*time.Millisecond, func() (err error) {
		leader, err = check()
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("testserver: %s %w", notYet, err)
	}
	return leader, nil
}

// build makes the n servers of a launch attempt with node (node i) and
// returns their processes for fixture.launch.
func (g *group[S]) build(n int, node func(i int) (S, error)) ([]*Process, error) {
	g.nodes = nil
	procs := make([]*Process, 0, n)
	for i := 0; i < n; i++ {
		s, err := node(i)
		if err != nil {
			return nil, err
		}
		procs = append(procs, s.proc())
		g.nodes = append(g.nodes, s)
	}
	return procs, nil
}

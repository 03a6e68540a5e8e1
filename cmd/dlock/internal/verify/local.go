package verify

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// Server faults, for stores the command runs itself (--local).
const (
	FaultServerPause = "server-pause" // SIGSTOP a server for 2 TTL (ensembles: the leader and a follower in turn; Redlock: 2 of 5 masters)
	FaultServerKill  = "server-kill"  // SIGKILL a server, restart it after 1.5 TTL (same targets)
	FaultServerCut   = "server-cut"   // ZooKeeper and etcd ensembles: cut the leader, then a follower, off the network for longer than the session or lease, then heal
	FaultFailover    = "failover"     // Redis Sentinel: SIGKILL the master, wait for the replica's promotion, bring the old master back as a replica
)

// LocalKinds are the stores --local can run.
var LocalKinds = []string{"redis", "redis-sentinel", "redis-sentinel-wait", "redlock", "zookeeper", "etcd", "postgres", "postgres-session", "mysql", "mysql-session", "sqlite"}

// Local is a store the command started: its URL, its server processes and
// the labels of faults outside its assumptions.
type Local struct {
	Kind    string
	URL     string
	Version string

	t       *localT
	servers []*testserver.Process
	leader  func() (int, error) // ensembles: the index of the leader
	// outside labels server faults beyond the store's documented
	// assumptions (a Redis server that restarts empty).
	outside  map[string]string
	turn     int
	sentinel *testserver.SentinelGroup

	// The cut of an ensemble member (server-cut): cut and heal member i,
	// settle waits until the ensemble serves again with every member.
	// cutWhy says why the store cannot take it; session is the ZooKeeper
	// session timeout in the URL (a cut lasts longer than it).
	cut, heal func(i int) error
	settle    func() error
	cutWhy    string
	session   time.Duration
}

// StartLocal starts the servers of kind on free loopback ports, as the
// tests start them; Close stops them and removes their directories.
func StartLocal(kind string, log io.Writer) (l *Local, err error) {
	if !slices.Contains(LocalKinds, kind) {
		return nil, fmt.Errorf("--local %q: want one of %s", kind, strings.Join(LocalKinds, ", "))
	}
	t := &localT{log: log}
	l = &Local{Kind: kind, t: t, outside: map[string]string{}}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(localFatal)
			if !ok {
				panic(r)
			}
			t.close()
			l, err = nil, fmt.Errorf("--local %s: %s", kind, string(f))
		}
	}()
	if err := l.start(t); err != nil {
		return nil, err
	}
	l.Version = serverVersion(kind)
	return l, nil
}

// start starts the servers of l.Kind and sets the URL and what the faults
// need.
func (l *Local) start(t *localT) error {
	switch l.Kind {
	case "redis":
		s := testserver.Redis(t)
		l.URL, l.servers = "redis://"+s.Addr(), []*testserver.Process{s.Process}
		l.outside[FaultServerKill] = "a Redis server restarted without persistence forgets its locks"
	case "redis-sentinel", "redis-sentinel-wait":
		g := testserver.RedisSentinel(t)
		l.sentinel = g
		l.URL = "redis+sentinel://" + strings.Join(g.SentinelAddrs(), ",") + "/" + g.MasterName()
		l.outside[FaultFailover] = "a Sentinel failover: replication is asynchronous, the promoted replica may not have the lock"
		if l.Kind == "redis-sentinel-wait" {
			l.URL += "?wait_replicas=1"
			l.outside[FaultFailover] = "a Sentinel failover with WAIT for 1 replica: WAIT narrows the window, it does not make replication synchronous"
		}
	case "redlock":
		g := testserver.RedisN(t, 5)
		l.URL = "redlock://" + strings.Join(g.Addrs(), ",")
		l.servers = g.Processes()
	case "zookeeper":
		g := testserver.ZooKeeperEnsemble(t, 3, l.isolation()...)
		l.URL = "zk://" + g.ConnectString() + "?session_timeout=4s"
		l.servers = g.Processes()
		l.leader, l.session = g.Leader, 4*time.Second
		l.cuttable(g.Cut, g.Heal, g.WaitLeader)
	case "etcd":
		g := testserver.EtcdCluster(t, 3, l.isolation()...)
		l.URL = "etcd://" + strings.Join(g.Addrs(), ",") + "/verify"
		l.servers = g.Processes()
		l.leader = g.Leader
		l.cuttable(g.Cut, g.Heal, g.WaitLeader)
	case "postgres", "postgres-session":
		s := testserver.Postgres(t)
		l.URL, l.servers = s.TestDSN(), []*testserver.Process{s.Process}
		if l.Kind == "postgres-session" {
			l.URL += "&mode=session"
		}
	case "mysql", "mysql-session":
		s := testserver.MariaDB(t)
		l.URL, l.servers = "mysql://root@"+s.Addr()+"/test", []*testserver.Process{s.Process}
		if l.Kind == "mysql-session" {
			l.URL += "?mode=session"
		}
	case "sqlite":
		dir, err := os.MkdirTemp("", "dlock-verify-sqlite-")
		if err != nil {
			return err
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		l.URL = "sqlite://" + filepath.ToSlash(filepath.Join(dir, "locks.db"))
	}
	return nil
}

// cuttable lets server-cut cut ensemble members off, unless the store
// cannot take it (cutWhy); settle waits for a leader again.
func (l *Local) cuttable(cut, heal func(int) error, waitLeader func(time.Duration) (int, error)) {
	if l.cutWhy == "" {
		l.cut, l.heal = cut, heal
		l.settle = func() error { _, err := waitLeader(30 * time.Second); return err }
	}
}

// Close stops every server.
func (l *Local) Close() { l.t.close() }

// canServerFault says whether the store has servers to fault.
func (l *Local) canServerFault() error {
	if l.sentinel != nil {
		return fmt.Errorf("server faults on a Sentinel group are its failover: use --faults failover")
	}
	if len(l.servers) == 0 {
		return fmt.Errorf("server faults cannot be applied to %s: it has no server", l.Kind)
	}
	return nil
}

// isolation returns the option that runs each member of an ensemble in a
// network namespace of its own, so that server-cut can cut one off; where
// that cannot be done (not root, no ip) the ensemble runs on loopback and
// cutWhy says why server-cut is not applicable.
func (l *Local) isolation() []testserver.Option {
	if err := testserver.CanIsolate(); err != nil {
		l.cutWhy = "a member is cut off in a network namespace of its own, which cannot be made here: " + err.Error()
		return nil
	}
	return []testserver.Option{testserver.WithIsolation()}
}

// canCut says whether the store can take server-cut, and if not why.
func (l *Local) canCut() error {
	switch {
	case l.cutWhy != "":
		return fmt.Errorf("not applicable to --local %s: %s", l.Kind, l.cutWhy)
	case l.cut == nil:
		return fmt.Errorf("not applicable to --local %s: it cuts a member of a 3-node ensemble off the network (--local zookeeper or etcd)", l.Kind)
	}
	return nil
}

// cutFor is how long a cut lasts: 2 TTL, and longer than a ZooKeeper
// session, so that the cut member's sessions and leases expire.
func (l *Local) cutFor(ttl time.Duration) time.Duration {
	return max(2*ttl, l.session+ttl)
}

// targets picks the servers of the next server fault: the only server; 2
// of Redlock's 5 masters (a minority); in an ensemble, the leader and a
// follower in turn.
func (l *Local) targets() ([]*testserver.Process, string) {
	l.turn++
	switch {
	case len(l.servers) == 1:
		return l.servers, "the server"
	case l.leader == nil: // Redlock
		i := l.turn % len(l.servers)
		return []*testserver.Process{l.servers[i], l.servers[(i+1)%len(l.servers)]}, "2 of 5 masters"
	}
	leader, err := l.leader()
	if err != nil || leader < 0 {
		leader = 0
	}
	if l.turn%2 == 1 {
		return []*testserver.Process{l.servers[leader]}, "the leader"
	}
	return []*testserver.Process{l.servers[(leader+1)%len(l.servers)]}, "a follower"
}

// apply runs one server fault and returns its fault record's label.
func (l *Local) apply(kind string, ttl time.Duration) (string, error) {
	if kind == FaultFailover {
		if l.sentinel == nil {
			return "", fmt.Errorf("failover needs --local redis-sentinel")
		}
		return l.failover()
	}
	ps, what := l.targets()
	var errs []error
	switch kind {
	case FaultServerPause:
		for _, p := range ps {
			errs = append(errs, p.Pause())
		}
		time.Sleep(2 * ttl)
		for _, p := range ps {
			errs = append(errs, p.Resume())
		}
	case FaultServerKill:
		for _, p := range ps {
			errs = append(errs, p.Kill())
		}
		// Redlock's delayed restart: a master comes back empty only after
		// the TTL, so the locks it forgot have expired everywhere.
		time.Sleep(ttl * 3 / 2)
		for _, p := range ps {
			errs = append(errs, p.Restart())
		}
	case FaultServerCut:
		if err := l.canCut(); err != nil {
			return what, err
		}
		d := l.cutFor(ttl)
		for _, p := range ps {
			i := slices.Index(l.servers, p)
			errs = append(errs, l.cut(i))
			what += " (" + p.Name() + ")"
		}
		time.Sleep(d)
		for _, p := range ps {
			errs = append(errs, l.heal(slices.Index(l.servers, p)))
		}
		// The window ends when the healed member serves again.
		errs = append(errs, l.settle())
		what += fmt.Sprintf(" cut off from the other members and the clients for %v", d)
	default:
		return "", fmt.Errorf("unknown server fault %q", kind)
	}
	return what, errors.Join(errs...)
}

// ready brings every server of the store back before the next run: one
// left paused is resumed, one left dead is restarted, and each must pass
// its readiness check. A fault's restart that failed must not turn into
// the next run's "cannot open".
func (l *Local) ready() error {
	var errs []error
	for _, p := range l.servers {
		switch {
		case p.Paused():
			errs = append(errs, p.Resume(), p.WaitReady())
		case p.Running():
			errs = append(errs, p.WaitReady())
		default:
			errs = append(errs, p.Restart())
		}
	}
	return errors.Join(errs...)
}

// failover kills the Sentinel group's master, waits until the Sentinel
// promotes the replica, and brings the old master back as its replica.
func (l *Local) failover() (string, error) {
	g := l.sentinel
	cur, err := g.CurrentMaster()
	if err != nil {
		return "", err
	}
	old := g.Node(cur)
	if old == nil {
		return "", fmt.Errorf("the Sentinel names %s, not one of its nodes", cur)
	}
	if err := old.Kill(); err != nil {
		return "", err
	}
	next, err := g.WaitFailover(cur, 30*time.Second)
	if err != nil {
		old.Restart()
		return "", err
	}
	return "master " + cur + " killed, " + next + " promoted", old.RestartAsReplicaOf(next)
}

// serverVersion is the first line a server binary prints of its version,
// or the embedded SQLite driver's module version.
func serverVersion(kind string) string {
	kind, _, _ = strings.Cut(kind, "-")
	if kind == "sqlite" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, m := range bi.Deps {
				if m.Path == "modernc.org/sqlite" {
					return "modernc.org/sqlite " + m.Version + " (embedded)"
				}
			}
		}
		return "embedded"
	}
	return testserver.Version(kind)
}

// localT is the testserver.T of servers run outside tests.
type localT struct {
	log      io.Writer
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// localFatal carries a Fatalf or Skip of testserver out of StartLocal.
type localFatal string

func (t *localT) Helper()          {}
func (t *localT) Cleanup(f func()) { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }
func (t *localT) Failed() bool     { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }
func (t *localT) Logf(format string, args ...any) {
	if t.log != nil {
		fmt.Fprintf(t.log, format+"\n", args...)
	}
}

func (t *localT) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	t.Logf(format, args...)
}

func (t *localT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	panic(localFatal(fmt.Sprintf(format, args...)))
}

func (t *localT) Skip(args ...any) { panic(localFatal(fmt.Sprint(args...))) }

// close runs the clean-ups, last first.
func (t *localT) close() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/verify"
	"github.com/dlock-dev/dlock/internal/redact"
)

// verifyWorkerEnv carries a worker's configuration, as JSON, to the dlock
// process that dlock verify re-executes as one of its workers.
const verifyWorkerEnv = "DLOCK_VERIFY_WORKER"

func init() {
	commands = append(commands, &command{
		name:     "verify",
		synopsis: "dlock verify (--url URL | --local KIND) --out DIR [--kind K [--limit N]] [--workers N] [--duration D] [--ttl D] [--faults LIST] [--seed S] [--fair] [--mode M] [--mutate M]",
		usage:    verifyUsage,
		flags:    verifyFlagSet,
		order:    []string{"url URL", "connect-timeout D", "local KIND", "out DIR", "kind K", "limit N", "workers N", "duration D", "ttl D", "faults LIST", "seed S", "fair", "mode M", "skew R", "mutate M", "name NAME", "matrix", "table FILE", "parallel N"},
		run:      runVerify,
	})
}

const verifyUsage = `Usage: dlock verify [flags] --url URL --out DIR

Prove dlock's guarantees on a store: worker processes (this binary, run
again) contend for one lock and, holding it, read a counter on a fenced
resource that dlock verify runs, wait a little, and write it back plus one
with their fencing token. Every acquire, renewal, release, loss and write is
recorded with CLOCK_MONOTONIC timestamps; faults are injected on a schedule
drawn from --seed, so a failing run can be replayed. At the end the history
is checked for:
  (a) no grant started inside another holder's validity (from Lock's return
      to Unlock, the lease's Deadline, or the loss the holder saw);
  (b) fencing tokens increase in grant order;
  (c) the resource accepted no write with a token below one it had accepted;
and the report gives raw overlaps (two workers that believed they held the
lock at once), lost updates, and the time from a holder's kill to the next
grant.

Kinds (--kind): the workers use the name as
  mutex       Mutex.Lock (the default), as above
  semaphore   Semaphore(name, --limit N).Acquire: (a) becomes "never more
              than N valid permits at once". Permits do no fenced write: up
              to N of them may write at once and one token cannot tell them
              apart, so (c) has nothing to check (use a mutex for that)
  rw          RWMutex: one grant in four (drawn from --seed) a writer's
              Lock, doing the fenced increment; the others RLock and do a
              fenced read, refused below a later writer's token. (a) becomes
              "no reader valid beside a writer, no two writers"
  election    Election.Campaign; the leader does the fenced increment and
              resigns. (a) one leader at a time; (b) also: terms increase
              in the order leaders were elected
The checks count validity as for the mutex: a grant ends at its release,
its loss or its Deadline. A backend that does not grant the kind is
refused before the run starts (exit 2).

Faults (--faults, comma-separated; each lands on the worker that just read
the resource, i.e. inside its critical section, every 1-2 TTL, the kinds in
turn):
  pause         SIGSTOP the holder for 1.5-2.5 TTL, then SIGCONT: its write
                arrives late and the fence must refuse it
  kill          SIGKILL the holder; a new worker starts (on ZooKeeper the lock
                frees when the dead session times out: see session_timeout)
  latency       the holder's replies from the store come TTL/4 late, for 2 TTL
  drop          the holder's replies from the store never arrive, for 1.5 TTL;
                then its connections are reset
  cut           the holder's link to the store is cut for 2 TTL
  slow-write    the holder's write reaches the resource 1.5 TTL late while its
                link to the store is cut
  skew          every other worker's dlock Clock runs at 1+--skew times real
                time for the whole run; a skew beyond the Drift (1%) is outside
                dlock's assumptions and its violations are labelled so
  server-pause  (--local) SIGSTOP a server for 2 TTL: the only one; 2 of
                Redlock's 5 masters; the leader and a follower of a 3-node
                ZooKeeper or etcd ensemble, in turn
  server-kill   (--local) SIGKILL the same targets, restart after 1.5 TTL
                (Redlock's delayed restart); a Redis server comes back empty,
                which is outside its assumptions, and is labelled so
  server-cut    (--local zookeeper, etcd) cut the leader, then a follower,
                of the 3-node ensemble off the network (from the other
                members and from every client, both ways) for 2 TTL and
                longer than the ZooKeeper session (4 s), then heal and wait
                until it serves again. Each member runs in a Linux network
                namespace of its own, which needs root and iproute2's ip;
                without them, or on another kind, it is not applicable and
                the command says so before it starts
  failover      (--local redis-sentinel, redis-sentinel-wait) SIGKILL the
                master, wait for the Sentinel to promote the replica, bring the
                old master back as its replica: outside Redis's assumptions
                (asynchronous replication, with or without WAIT), so what it
                causes is reported and labelled
The network faults go through TCP proxies that dlock verify runs on
loopback between each worker and the store (and the resource); they cannot
be applied to sqlite, mem, redis+cluster or redis+sentinel (whose clients
are redirected past a proxy), and the command says so before it starts.

Mutations (--mutate) make runs that must fail, to show the checker can:
  fence-off     the resource accepts stale tokens          → (c) violations
  validity-off  workers ignore their leases' validity      → (a) violations
  broken-lock   each worker has a lock of its own (mem://) → (a), (b)

Flags:
%FLAGS%
Output in --out: report.md (verdicts, counts, the first violations),
result.json, grants.png (grants per worker over time, faults shaded,
violations in red), history.html (porcupine's visualizer of the grants as
a lock history, for runs of up to 5000 grants; porcupine's verdict is in
the report) and history/ (every worker's events, the resource's log, the
faults).

The published table (docs/VERIFICATION.md) is written by a matrix run:
  dlock verify --matrix --local all --faults all --duration 2m \
      --out /tmp/verify --table docs/VERIFICATION.md [--parallel 2]
which runs every kind × every fault it can take, each once fenced and once
with the fence off, and writes the table with the command, the date and
the server versions. Its exit status is 1 if any cell failed.

Exit status: 0 when no property was violated, 1 when one was (see
DIR/report.md), 2 for bad flags or a store that does not grant --kind, 5
when the store cannot be reached.
Ctrl-C stops every worker and writes the report of what ran. The progress
line (every second) counts only violations the final check will count too;
those it cannot confirm yet (a worker that has not recorded its release,
a fault still under way) it gives as "more to confirm at the end".
`

type verifyOpts struct {
	url, out, faults, mutate, name string
	workers                        int
	duration, ttl, connect         optDuration
	seed                           uint64
	fair                           bool
	skew                           float64
	mode, local, table             string
	matrix                         bool
	parallel                       int
	kind                           string
	limit                          int
}

func verifyFlagSet(fs *flag.FlagSet) any {
	o := &verifyOpts{}
	urlFlag(fs, &o.url, &o.connect)
	fs.StringVar(&o.out, "out", "", "the directory for report.md, result.json and the histories\n(must not exist or be empty)")
	fs.IntVar(&o.workers, "workers", 4, "worker processes")
	fs.Var(&o.duration, "duration", "how long to run (default 30s)")
	fs.Var(&o.ttl, "ttl", "the lease TTL (default 1s)")
	fs.StringVar(&o.faults, "faults", "pause,kill", "faults to inject: pause, kill, or none")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault schedule (default: from the time; printed)")
	fs.BoolVar(&o.fair, "fair", false, "workers lock with dlock.Fair()")
	fs.StringVar(&o.mutate, "mutate", "", "fence-off, validity-off or broken-lock: a run that must fail")
	fs.StringVar(&o.name, "name", "dlock-verify", "the lock's name")
	fs.StringVar(&o.kind, "kind", verify.KindMutex, "what the workers use the name as: "+strings.Join(verify.Kinds, ", "))
	fs.IntVar(&o.limit, "limit", 0, "with --kind semaphore: its limit (fewer than --workers)")
	fs.Float64Var(&o.skew, "skew", -0.005, "the clock skew of the skew fault: -0.005 runs 0.5% slow")
	fs.StringVar(&o.local, "local", "", "run the store here instead of --url: "+strings.Join(verify.LocalKinds, ", ")+"\n(servers on free loopback ports, as the tests start them)")
	fs.BoolVar(&o.matrix, "matrix", false, "run every --local kind (a list, or all) × every --faults fault (or all),\neach fenced and unfenced, and write --table")
	fs.StringVar(&o.table, "table", "", "with --matrix: the markdown table to write (docs/VERIFICATION.md)")
	fs.IntVar(&o.parallel, "parallel", 1, "with --matrix: kinds run at once")
	fs.StringVar(&o.mode, "mode", "", "the backend's mode where it has modes (postgres, mysql: lease or session)")
	return o
}

func runVerify(ctx context.Context, e *env, opts any, args []string) int {
	o := opts.(*verifyOpts)
	c := lookup("verify")
	if o.matrix {
		if o.kind != verify.KindMutex || o.limit != 0 {
			return usageError(e, c, "--matrix runs the mutex; run --kind %s without --matrix", o.kind)
		}
		return runMatrix(ctx, e, o)
	}
	if o.local != "" && o.url != "" {
		return usageError(e, c, "--url and --local exclude each other")
	}
	local, url, code := verifyBackend(e, c, o)
	if local != nil {
		defer local.Close()
	}
	if code != exitOK {
		return code
	}
	cfg := o.config(e, url, local)
	self, err := os.Executable()
	if err != nil {
		e.errorf("verify: cannot find the dlock binary to start workers: %v", err)
		return exitFailure
	}
	cfg.Command = workerCommand(self)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(e.stderr, "dlock verify: %s, %s, %d workers, %v, ttl %v, faults %s, seed %d\n",
		redact.String(url), describeKind(cfg), cfg.Workers, cfg.Duration, cfg.TTL, o.faults, cfg.Seed)
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		e.errorf("verify: %v", err)
		if errors.Is(err, errUsage) || strings.HasPrefix(err.Error(), "--") {
			return exitUsage
		}
		return errorCode(err)
	}
	fmt.Fprintln(e.stdout, rep.Summary())
	fmt.Fprintf(e.stdout, "report: %s/report.md\n", cfg.Out)
	if rep.Result.Failed() {
		return exitFailure
	}
	return exitOK
}

// verifyBackend starts the servers of --local, or finds the backend's URL
// (--url, $DLOCK_URL, with --connect-timeout), and adds --mode to the URL.
// code is exitOK unless that fails; a Local it returns is the caller's to
// close.
func verifyBackend(e *env, c *command, o *verifyOpts) (local *verify.Local, url string, code int) {
	var err error
	if o.local != "" {
		fmt.Fprintf(e.stderr, "dlock verify: starting %s servers\n", o.local)
		if local, err = verify.StartLocal(o.local, nil); err != nil {
			e.errorf("verify: %v", err)
			return nil, "", exitBackend
		}
		url = local.URL
	} else {
		if url, err = backendURL(o.url, e.getenv); err != nil {
			e.errorf("verify: %v", err)
			return nil, "", urlErrorCode(err)
		}
		if o.connect.set {
			if url, err = withConnectTimeout(url, o.connect.d); err != nil {
				return nil, "", usageError(e, c, "%v", err)
			}
		}
	}
	if o.mode != "" {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + "mode=" + o.mode
	}
	return local, url, exitOK
}

// config is the run's configuration from the flags, without Command.
func (o *verifyOpts) config(e *env, url string, local *verify.Local) verify.Config {
	cfg := verify.Config{
		URL: url, Name: o.name, Workers: o.workers, Fair: o.fair, Seed: o.seed, Skew: o.skew,
		Out: o.out, Mutate: o.mutate, Duration: 30 * time.Second, TTL: time.Second,
		Progress: e.stderr, Local: local, Kind: o.kind, Limit: o.limit,
	}
	if o.duration.set {
		cfg.Duration = o.duration.d
	}
	if o.ttl.set {
		cfg.TTL = o.ttl.d
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if o.faults != "none" && o.faults != "" {
		cfg.Faults = strings.Split(o.faults, ",")
	}
	return cfg
}

var errUsage = errors.New("usage")

// describeKind is the run's kind as the first line shows it.
func describeKind(cfg verify.Config) string {
	if cfg.Kind == verify.KindSemaphore && cfg.Limit > 0 {
		return fmt.Sprintf("semaphore of %d", cfg.Limit)
	}
	return cfg.Kind
}

// verifyWorker runs this process as a worker of dlock verify when the
// environment says so; ok is false otherwise.
func verifyWorker() (code int, ok bool) {
	raw := os.Getenv(verifyWorkerEnv)
	if raw == "" {
		return 0, false
	}
	var wc verify.WorkerConfig
	if err := json.Unmarshal([]byte(raw), &wc); err != nil {
		fmt.Fprintf(os.Stderr, "dlock verify worker: bad %s: %v\n", verifyWorkerEnv, err)
		return exitUsage, true
	}
	f, err := os.OpenFile(wc.Events, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock verify worker %d: %v\n", wc.ID, err)
		return exitFailure, true
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := verify.RunWorker(ctx, wc, f); err != nil {
		fmt.Fprintf(os.Stderr, "dlock verify worker %d: %v\n", wc.ID, err)
		return exitFailure, true
	}
	return exitOK, true
}

// runMatrix runs dlock verify --matrix.
func runMatrix(ctx context.Context, e *env, o *verifyOpts) int {
	c := lookup("verify")
	if o.url != "" || o.out == "" || o.table == "" {
		return usageError(e, c, "--matrix runs --local stores (not --url) and needs --out and --table")
	}
	var kinds, faults []string
	if o.local != "all" && o.local != "" {
		kinds = strings.Split(o.local, ",")
	}
	if o.faults != "all" {
		faults = strings.Split(o.faults, ",")
	}
	self, err := os.Executable()
	if err != nil {
		e.errorf("verify: cannot find the dlock binary to start workers: %v", err)
		return exitFailure
	}
	mc := verify.MatrixConfig{
		Kinds: kinds, Faults: faults, Out: o.out, Table: o.table, Parallel: o.parallel,
		CommandLine: "dlock " + strings.Join(os.Args[1:], " "),
		Base: verify.Config{Name: o.name, Workers: o.workers, Fair: o.fair, Seed: o.seed, Skew: o.skew,
			Duration: 2 * time.Minute, Command: workerCommand(self), Progress: e.stderr},
	}
	if o.duration.set {
		mc.Base.Duration = o.duration.d
	}
	if o.ttl.set {
		mc.Base.TTL = o.ttl.d
	}
	if mc.Base.Seed == 0 {
		mc.Base.Seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := verify.RunMatrix(ctx, mc)
	if err != nil {
		e.errorf("verify: %v", err)
	}
	failed := false
	for _, r := range rows {
		if r.Err != nil || (r.Fenced != nil && r.Fenced.Result.Failed()) {
			failed = true
		}
	}
	fmt.Fprintf(e.stdout, "table: %s\n", o.table)
	if failed || err != nil {
		return exitFailure
	}
	return exitOK
}

// workerCommand re-executes the binary as a worker.
func workerCommand(self string) func(verify.WorkerConfig) *exec.Cmd {
	return func(wc verify.WorkerConfig) *exec.Cmd {
		b, _ := json.Marshal(wc)
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), verifyWorkerEnv+"="+string(b))
		return cmd
	}
}

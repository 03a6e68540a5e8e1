package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redact"
	"github.com/dlock-dev/dlock/internal/workload"
)

func init() {
	commands = append(commands, &command{
		name:     "bench",
		synopsis: "dlock bench [--url URL] [--workloads W,...] [--duration D] [--fair] [--json]",
		usage:    benchUsage,
		flags:    benchFlagSet,
		order:    []string{"url URL", "connect-timeout D", "workloads W,...", "duration D", "fair", "json", "verbose"},
		run:      runBench,
	})
}

const benchUsage = `Usage: dlock bench [flags]

Measure the backend with the standard workloads of the dlock module (the
ones its own benchmarks and docs/BENCHMARKS.md use), each for --duration
after a 0.5 s warm-up:
  uncontended  one goroutine locks and unlocks one name: ops/s, p50/p99
  distinct     32 goroutines of one Client, each on a name of its own: ops/s
  contended8   8 contenders on one name, each with a Client (a connection)
  contended64  of its own, holding the lock for 100 µs: grants/s, owner
               changes/s, a waiter's wait and the hand-off (release to the
               next grant) p50/p99, Jain's fairness index
  semaphore4x16  a semaphore of 4 with 16 contenders, each with a Client of
               its own, holding a permit for 100 µs: grants/s, a waiter's
               wait p50/p99, the most permits seen held at once
  rw90         a read-write lock with 16 such contenders, one operation in
               ten a write: grants/s, writes/s, a writer's and a reader's
               wait p50/p99, the most readers seen at once
  herd         10, 100 and 1,000 waiters on one name over 10 Clients:
               backend calls, wake-ups and store requests per release,
               hand-off p50/p99 (herdN: N waiters only)
  held         10,000 and 100,000 leases held by one Client for 4 s (TTL
               3 s): bytes per lease, goroutines, renewal calls/s, leases
               lost (heldN: N leases only)
Every workload reports calls/op, the calls its Clients made to the backend
per operation, and where the store counts its requests store-req/op, the
store's count: Redis commands (those its scripts run included), etcd gRPC
messages received, ZooKeeper packets received (mntr), MySQL statements
(Questions). The store counts every client's: run it on a quiet store.
Lock names start with "dlockbench/"; nothing is left held. A workload of
a kind the backend cannot keep (a semaphore on Redlock) is skipped, with
the reason, and does not fail the run.

Progress goes to stderr, a table to stdout (--json: one JSON document).

Flags:
%FLAGS%
Exit status:
  0  every workload ran
  1  a workload failed (for instance, a held lease was lost)
  2  usage error: a bad flag, URL or workload name
  5  backend error: the backend cannot be opened or does not answer
`

type benchFlags struct {
	url       string
	connect   optDuration
	workloads string
	duration  optDuration
	fair      bool
	json      bool
	verbose   bool
}

func benchFlagSet(fs *flag.FlagSet) any {
	f := &benchFlags{}
	urlFlag(fs, &f.url, &f.connect)
	fs.StringVar(&f.workloads, "workloads", strings.Join(workload.Workloads, ","), "the workloads to run, in order, separated by commas")
	fs.Var(&f.duration, "duration", "how long each workload is measured (default 4s)")
	fs.BoolVar(&f.fair, "fair", false, "lock with dlock.Fair(): waiters are granted in arrival order")
	fs.BoolVar(&f.json, "json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&f.verbose, "verbose", false, "log the library's details on stderr")
	return f
}

// benchReport is the --json output of dlock bench.
type benchReport struct {
	URL        string        `json:"url"` // without its password
	Fair       bool          `json:"fair"`
	Duration   string        `json:"duration"`
	StoreCount string        `json:"store_requests,omitempty"` // what store-req counts
	Results    []benchResult `json:"results"`
	Skipped    []benchSkip   `json:"skipped,omitempty"`
}

// benchSkip is a workload of a kind the backend cannot keep.
type benchSkip struct {
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}

type benchResult struct {
	Workload string             `json:"workload"`
	Ops      int64              `json:"ops"`
	Seconds  float64            `json:"seconds"`
	Metrics  map[string]float64 `json:"metrics"`
	order    []string           // of the metrics, as the workload gave them
}

func runBench(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*benchFlags)
	c := lookup("bench")
	workloads := strings.Split(f.workloads, ",")
	for i := range workloads {
		workloads[i] = strings.TrimSpace(workloads[i])
	}
	if err := workload.CheckWorkloads(workloads); err != nil {
		return usageError(e, c, "--workloads: %v", err)
	}
	wc := workload.WorkloadConfig{Duration: 4 * time.Second}
	if f.duration.set {
		if f.duration.d <= 0 {
			return usageError(e, c, "--duration %v: must be positive", f.duration.d)
		}
		wc.Duration = f.duration.d
	}
	store, u, code := benchStore(ctx, e, f)
	if code != exitOK {
		return code
	}
	defer store.close()
	rep := benchReport{URL: redact.URL(u), Fair: f.fair, Duration: wc.Duration.String(), StoreCount: store.what}
	failed := false
	for i, w := range workloads {
		progress := func(phase string) {
			fmt.Fprintf(e.stderr, "dlock bench: [%d/%d] %s\n", i+1, len(workloads), phase)
		}
		rs, err := workload.RunWorkload(ctx, store.Store, w, wc, progress)
		for _, r := range rs {
			rep.Results = append(rep.Results, toBenchResult(r))
		}
		if errors.Is(err, errors.ErrUnsupported) {
			fmt.Fprintf(e.stderr, "dlock bench: [%d/%d] %s skipped: %v\n", i+1, len(workloads), w, err)
			rep.Skipped = append(rep.Skipped, benchSkip{w, err.Error()})
			continue
		}
		if err != nil {
			e.errorf("bench: %s on %s: %v", w, rep.URL, err)
			if errors.Is(err, dlock.ErrBackendUnavailable) {
				return exitBackend
			}
			failed = true
		}
	}
	if err := writeBench(e.stdout, rep, f.json); err != nil {
		e.errorf("bench: %v", err)
		return exitFailure
	}
	if failed {
		return exitFailure
	}
	return exitOK
}

// openedStore is the store dlock bench measures, with what closes it.
type openedStore struct {
	workload.Store
	what  string // what Store.Requests counts
	close func()
}

// benchStore checks that the backend opens (a usage error or a backend
// error is reported as for the other commands) and returns the Store.
func benchStore(ctx context.Context, e *env, f *benchFlags) (openedStore, *url.URL, int) {
	octx, cancel := openContext(ctx, f.url, f.connect)
	defer cancel()
	client, raw, code := openClient(octx, e, f.url, f.connect, f.verbose)
	if client == nil {
		return openedStore{}, nil, code
	}
	client.Close()
	if f.connect.set {
		raw, _ = withConnectTimeout(raw, f.connect.d) // it parsed in openClient
	}
	u, err := url.Parse(raw)
	if err != nil {
		e.errorf("bench: --url: %v", err)
		return openedStore{}, nil, exitUsage
	}
	open, err := benchOpener(u)
	if err != nil {
		e.errorf("%v", err)
		return openedStore{}, nil, exitUsage
	}
	s := openedStore{Store: workload.Store{NewBackend: func(ctx context.Context) (dlock.Backend, error) {
		octx, cancel := openContext(ctx, f.url, f.connect)
		defer cancel()
		return open(octx, u)
	}}}
	if f.fair {
		s.Options = []dlock.Option{dlock.Fair()}
	}
	s.Options = append(s.Options, dlock.WithLogger(cliLogger(e.stderr, f.verbose)))
	s.Requests, s.what, s.close = storeCounter(ctx, u)
	return s, u, exitOK
}

func toBenchResult(r workload.Result) benchResult {
	br := benchResult{Workload: r.Workload, Ops: r.Ops, Seconds: r.Elapsed.Seconds(), Metrics: make(map[string]float64, len(r.Metrics))}
	for _, x := range r.Metrics {
		br.Metrics[x.Unit] = x.Value
		br.order = append(br.order, x.Unit)
	}
	return br
}

// writeBench prints rep as a table (a row per workload: its operations,
// seconds and figures) or as JSON.
func writeBench(w io.Writer, rep benchReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s, fair %v, %s per workload\n", rep.URL, rep.Fair, rep.Duration)
	if rep.StoreCount != "" {
		fmt.Fprintf(tw, "# store-req: %s\n", rep.StoreCount)
	}
	fmt.Fprintln(tw, "WORKLOAD\tOPS\tSECONDS\tFIGURES")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\n", r.Workload, r.Ops, r.Seconds, figures(r))
	}
	for _, sk := range rep.Skipped {
		fmt.Fprintf(tw, "%s\t-\t-\tskipped: %s\n", sk.Workload, sk.Reason)
	}
	return tw.Flush()
}

// figures lists r's metrics in the order the workload gave them.
func figures(r benchResult) string {
	s := make([]string, len(r.order))
	for i, unit := range r.order {
		s[i] = formatFigure(r.Metrics[unit]) + " " + unit
	}
	return strings.Join(s, ", ")
}

// formatFigure shows v with 3 significant digits, without exponent.
func formatFigure(v float64) string {
	switch {
	case v == float64(int64(v)):
		return strconv.FormatInt(int64(v), 10)
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 3-len(strconv.Itoa(int(v))), 64)
}

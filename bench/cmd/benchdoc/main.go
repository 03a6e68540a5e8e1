// Command benchdoc generates docs/BENCHMARKS.md and its charts from the
// bench module's benchmarks: dlock and the peer libraries (redsync single
// node and Redlock, bsm/redislock, etcd's concurrency.Mutex and recipes
// RWMutex, go-zookeeper's zk.Lock, cirello.io/pglock; x/sync's
// semaphore.Weighted and sync.RWMutex as the in-process ceiling) run by
// `go test -bench` in one process per backend, against the same servers, -runs times; the document shows the
// median of the runs with the ratio to the best peer beside each figure.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/benchdoc -runs 3 -out ../docs
//
// The servers are those the benchmarks start (internal/testserver), or the
// ones named by REDIS_ADDR, REDLOCK_ADDRS, ETCD_ADDR, ZK_ADDR, PG_DSN and
// MYSQL_DSN. -benchtime, -held, -held-runs and -timeout bound the whole
// generation: the defaults take about 20 minutes on a quiet machine with 2
// cores, and -timeout (25 minutes) ends it in any case, the document then
// saying that it is incomplete.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	runs      int
	out       string
	benchtime string
	backends  string
	held      string
	heldRuns  int
	timeout   time.Duration
	label     string
	input     string
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 3, "runs of every benchmark; the document shows their medians")
	flag.StringVar(&c.out, "out", "../docs", "the directory of BENCHMARKS.md; charts go to its bench/")
	flag.StringVar(&c.benchtime, "benchtime", "1s", "go test -benchtime of the timed workloads")
	flag.StringVar(&c.backends, "backends", "Redis|Redlock|Etcd|ZooKeeper|Postgres|MariaDB|InProcess", "the Benchmark functions to run (a regexp)")
	flag.StringVar(&c.held, "held", "10000", "the Held sizes to run (a regexp; empty: none)")
	flag.IntVar(&c.heldRuns, "held-runs", 1, "runs of Held (its figures vary little; each run holds for 4 s after taking the leases)")
	flag.DurationVar(&c.timeout, "timeout", 25*time.Minute, "bound of the whole generation")
	flag.StringVar(&c.label, "label", "", "a note put at the top of the document (e.g. that the machine was loaded)")
	flag.StringVar(&c.input, "input", "", "read benchmark output from this file instead of running the benchmarks")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.runs < 1 || c.heldRuns < 1 {
		return fmt.Errorf("-runs %d, -held-runs %d: want at least 1", c.runs, c.heldRuns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	var out []byte
	var err error
	if c.input != "" {
		out, err = os.ReadFile(c.input)
		if err != nil {
			return err
		}
	} else if out, err = runBenchmarks(ctx, c); err != nil {
		// Out of time: the document shows what ran, and says so.
		c.label = strings.TrimSpace(c.label + " Incomplete: " + err.Error() + ".")
	}
	res := parse(string(out))
	if res.len() == 0 {
		return errors.New("no benchmark results in the output")
	}
	if err := os.MkdirAll(filepath.Join(c.out, "bench"), 0o755); err != nil {
		return err
	}
	charts, err := drawCharts(res, filepath.Join(c.out, "bench"))
	if err != nil {
		return err
	}
	doc := document(c, res, charts, environment(context.Background()), time.Since(start))
	path := filepath.Join(c.out, "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchdoc: wrote %s and %d charts in %v\n", path, len(charts), time.Since(start).Round(time.Second))
	return nil
}

// runBenchmarks runs the timed workloads -runs times, then Held
// -held-runs times, and returns their output, which it also copies to
// stderr as it comes, and saves beside the document (bench/raw.txt) for
// -input. The timed workloads run in rounds, each round all of them once,
// so that a busy minute on a shared machine lands in one run of several
// libraries rather than in every run of one.
func runBenchmarks(ctx context.Context, c config) ([]byte, error) {
	// dlocktest.Bench (the SQL backends) puts the workloads under
	// Default and Fair.
	workloads := "^(Uncontended|DistinctNames|Contended|Contended64|Semaphore4x16|RW90|Election|Herd|Default|Fair)$"
	type pass struct {
		bench, benchtime string
		count            int
	}
	var passes []pass
	for range c.runs {
		passes = append(passes, pass{"^Benchmark(" + c.backends + ")$/./" + workloads, c.benchtime, 1})
	}
	passes = append(passes, pass{"^Benchmark(" + c.backends + ")$/^dlock$/^Held$/^(" + c.held + ")$", "1x", c.heldRuns})
	var all []byte
	for _, p := range passes {
		if strings.HasSuffix(p.bench, "/^()$") {
			continue
		}
		out, err := goTest(ctx, p.bench, p.benchtime, p.count)
		all = append(all, out...)
		if err != nil {
			// A benchmark that failed is listed in the document; the
			// others still count. Only running out of time ends it.
			fmt.Fprintf(os.Stderr, "benchdoc: %v\n", err)
			if ctx.Err() != nil {
				saveRaw(c, all)
				return all, err
			}
		}
	}
	saveRaw(c, all)
	return all, nil
}

// saveRaw keeps the output beside the document, also of a run that ran
// out of time, so that -input can rebuild the document from it.
func saveRaw(c config, out []byte) {
	raw := filepath.Join(c.out, "bench", "raw.txt")
	if err := os.MkdirAll(filepath.Dir(raw), 0o755); err == nil {
		os.WriteFile(raw, out, 0o644)
	}
}

// goTest runs one go test -bench in the bench module (the current
// directory), bounded by ctx.
func goTest(ctx context.Context, bench, benchtime string, runs int) ([]byte, error) {
	// go test's own timeout, a little before ctx's, ends it with the
	// results printed so far.
	left := time.Until(deadline(ctx)) - 30*time.Second
	if left <= 0 {
		return nil, ctx.Err()
	}
	args := []string{"test", "-run", "^$", "-bench", bench, "-benchtime", benchtime,
		"-count", fmt.Sprint(runs), "-timeout", left.Round(time.Second).String(), "."}
	fmt.Fprintf(os.Stderr, "benchdoc: go %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	// Out of time, the whole process group goes: killing go alone left
	// the test binary running, and its open stdout kept Run waiting.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var buf strings.Builder
	cmd.Stdout = teeWriter{&buf}
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("go test -bench %s: %w", bench, err)
	}
	return []byte(buf.String()), err
}

func deadline(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Hour)
	}
	return d
}

// teeWriter writes to w and to stderr, so that progress shows.
type teeWriter struct{ w *strings.Builder }

func (t teeWriter) Write(p []byte) (int, error) {
	os.Stderr.Write(p)
	return t.w.Write(p)
}

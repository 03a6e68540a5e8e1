package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// Faults a run can inject.
const (
	FaultPause = "pause" // SIGSTOP a holder inside its critical section for 1.5-2.5 TTL, then SIGCONT
	FaultKill  = "kill"  // SIGKILL a holder inside its critical section; a new worker takes its place
)

var (
	networkFaults = []string{FaultLatency, FaultDrop, FaultCut, FaultSlowWrite}
	allFaults     = append([]string{FaultPause, FaultKill, FaultSkew, FaultServerPause, FaultServerKill, FaultServerCut, FaultFailover}, networkFaults...)
)

// Mutations make a run that must fail, to show that the checker can.
const (
	MutateFenceOff    = "fence-off"    // the resource accepts stale tokens
	MutateValidityOff = "validity-off" // workers ignore their leases' validity
	MutateBrokenLock  = "broken-lock"  // every worker has a lock of its own (mem://)
)

// Config is a run.
type Config struct {
	URL      string
	Name     string // the lock's name (default "dlock-verify")
	Workers  int
	Duration time.Duration
	TTL      time.Duration
	Fair     bool
	Faults   []string
	Seed     uint64
	Out      string // the directory for the report and histories; must not exist or be empty
	Mutate   string
	// Skew is the clock skew of the skew fault's workers (default −0.005).
	Skew float64
	// Drift is the Drift the workers' Clients use (dlock's default): a
	// skew beyond it is outside dlock's assumptions.
	Drift float64
	// Command makes the command that runs one worker process: the dlock
	// binary re-executing itself with the worker's config.
	Command func(WorkerConfig) *exec.Cmd
	// Progress gets a progress line every second (nil: none).
	Progress io.Writer
	// Local is the store the command started (--local), whose servers the
	// server faults hit; nil for a store of the user's.
	Local *Local
	// Kind is what the workers use the name as: KindMutex (the default),
	// KindSemaphore (with Limit), KindRW or KindElection.
	Kind  string
	Limit int // a semaphore's limit
}

func (c *Config) check() error {
	if c.Name == "" {
		c.Name = "dlock-verify"
	}
	switch {
	case c.Workers < 2:
		return fmt.Errorf("--workers %d: a run needs at least 2 workers", c.Workers)
	case c.Duration <= 0:
		return fmt.Errorf("--duration %v must be positive", c.Duration)
	case c.TTL < dlock.MinTTL:
		return fmt.Errorf("--ttl %v is below dlock's minimum TTL %v", c.TTL, dlock.MinTTL)
	case c.Out == "":
		return errors.New("--out is required")
	}
	if err := c.checkKind(); err != nil {
		return err
	}
	for _, f := range c.Faults {
		if !slices.Contains(allFaults, f) {
			return fmt.Errorf("--faults: unknown fault %q (known: %s)", f, strings.Join(allFaults, ", "))
		}
		if f == FaultFailover && (c.Local == nil || c.Local.sentinel == nil) {
			return fmt.Errorf("--faults %s: a failover needs --local redis-sentinel or redis-sentinel-wait", f)
		}
		if f == FaultServerCut && c.Local != nil {
			if err := c.Local.canCut(); err != nil {
				return fmt.Errorf("--faults %s: %w", f, err)
			}
		}
		if f == FaultServerPause || f == FaultServerKill || f == FaultServerCut {
			if c.Local == nil {
				return fmt.Errorf("--faults %s: server faults need a store the command runs itself (--local)", f)
			}
			if err := c.Local.canServerFault(); err != nil {
				return fmt.Errorf("--faults %s: %w", f, err)
			}
		}
		if slices.Contains(networkFaults, f) && c.Mutate != MutateBrokenLock {
			if err := canFault(c.URL); err != nil {
				return fmt.Errorf("--faults %s: %w", f, err)
			}
		}
	}
	switch c.Mutate {
	case "", MutateFenceOff, MutateValidityOff, MutateBrokenLock:
	default:
		return fmt.Errorf("--mutate: unknown mutation %q (%s, %s, %s)", c.Mutate, MutateFenceOff, MutateValidityOff, MutateBrokenLock)
	}
	if c.Skew == 0 {
		c.Skew = -0.005
	}
	if c.Skew <= -1 || c.Skew >= 1 {
		return fmt.Errorf("--skew %v must be between -1 and 1 (exclusive)", c.Skew)
	}
	if c.Drift == 0 {
		c.Drift = dlock.DefaultDrift
	}
	if ents, err := os.ReadDir(c.Out); err == nil && len(ents) > 0 {
		return fmt.Errorf("--out %s exists and is not empty", c.Out)
	}
	return nil
}

// checkKind checks --kind and --limit.
func (c *Config) checkKind() error {
	if c.Kind == "" {
		c.Kind = KindMutex
	}
	switch c.Kind {
	case KindMutex, KindRW, KindElection:
		if c.Limit != 0 {
			return fmt.Errorf("--limit is for --kind %s, not %s", KindSemaphore, c.Kind)
		}
	case KindSemaphore:
		if c.Limit < 1 || c.Limit > dlock.MaxLimit {
			return fmt.Errorf("--kind %s needs --limit N, 1 to %d (got %d)", KindSemaphore, dlock.MaxLimit, c.Limit)
		}
		if c.Limit >= c.Workers {
			return fmt.Errorf("--limit %d with --workers %d: the permits would never run out and the check could not fail; use more workers than the limit", c.Limit, c.Workers)
		}
		if c.Mutate == MutateFenceOff {
			return fmt.Errorf("--mutate %s: a semaphore's permits do no fenced write (a single token cannot fence %d holders at once)", MutateFenceOff, c.Limit)
		}
	default:
		return fmt.Errorf("--kind: unknown kind %q (known: %s)", c.Kind, strings.Join(Kinds, ", "))
	}
	return nil
}

// libKind is the library's Kind for a run's kind.
func libKind(kind string) dlock.Kind {
	switch kind {
	case KindSemaphore:
		return dlock.KindSemaphore
	case KindRW:
		return dlock.KindRWMutex
	case KindElection:
		return dlock.KindElection
	}
	return dlock.KindMutex
}

// canGrant returns an error if c's backend refuses the run's kind: the
// workers would only collect refusals.
func (c *Config) canGrant(cl *dlock.Client) error {
	k := libKind(c.Kind)
	if k == dlock.KindMutex {
		return nil
	}
	limit := c.Limit
	switch k {
	case dlock.KindRWMutex:
		limit = dlock.RWLimit
	case dlock.KindElection:
		limit = 1
	}
	g, ok := cl.Backend().(dlock.Granter)
	var err error
	if !ok {
		err = errors.New("it grants mutexes only")
	} else {
		err = g.CanGrant(k, limit)
	}
	if err != nil {
		return fmt.Errorf("--kind %s: %s cannot grant a %s: %w", c.Kind, cl, dlock.Shape(k, limit), err)
	}
	return nil
}

// maxVisualized is the most grants drawn in history.html: porcupine's
// visualizer slows down past a few thousand operations.
const maxVisualized = 5000

// Report is what a run produced.
type Report struct {
	Config  Config    `json:"-"`
	Started time.Time `json:"started"`
	Elapsed time.Duration
	Faults  []Fault `json:"faults"`
	Result  Result  `json:"-"`
	Workers int     `json:"workers_started"`
	// Porcupine is porcupine's verdict on the grants as a lock history:
	// Ok, Illegal or Unknown (it timed out).
	Porcupine string
	history   History
}

// Run checks that cfg's store is reachable, runs the workers against it
// for cfg.Duration while injecting cfg.Faults, and checks the history.
// When ctx ends early it stops every worker and checks what it has. The
// histories, report.md and result.json are written to cfg.Out.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Mutate != MutateBrokenLock {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := dlock.Open(octx, cfg.URL)
		cancel()
		if err != nil {
			return nil, err
		}
		err = cfg.canGrant(c)
		c.Close()
		if err != nil {
			return nil, err
		}
	}
	hist := filepath.Join(cfg.Out, "history")
	if err := os.MkdirAll(hist, 0o755); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, hist: hist, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), procs: map[int]*exec.Cmd{}}
	for _, f := range cfg.Faults {
		if f != FaultSkew {
			r.scheduled = append(r.scheduled, f)
		}
	}
	if len(r.scheduled) > 0 {
		r.faultStart = r.rng.IntN(len(r.scheduled))
	}
	for _, f := range cfg.Faults {
		if slices.Contains(networkFaults, f) && r.net == nil {
			r.net = newNetFaults()
		}
	}
	rep, err := r.run(ctx)
	if err != nil {
		return nil, err
	}
	return rep, writeReport(cfg.Out, rep)
}

type runner struct {
	cfg        Config
	hist       string
	rng        *rand.Rand
	resAddr    string     // the resource's, for workers started after a kill
	net        *netFaults // nil without network faults
	scheduled  []string   // the faults the schedule injects (all but skew)
	faultN     int        // faults armed so far
	faultStart int        // the kind of the first, drawn from the seed

	mu      sync.Mutex
	procs   map[int]*exec.Cmd // live workers by id
	nextID  int
	faults  []Fault
	live    *Fault // a server fault being applied (recorded when it ends), for the progress line
	armed   string // a fault waiting for the next READ
	busy    bool   // a fault is in progress
	stopped bool
	waits   sync.WaitGroup // worker processes
	applied sync.WaitGroup // faults still being applied
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	rlog, err := os.Create(filepath.Join(r.hist, "resource.jsonl"))
	if err != nil {
		return nil, err
	}
	defer rlog.Close()
	res, err := NewResource(r.cfg.Mutate != MutateFenceOff, rlog, r.onRead)
	if err != nil {
		return nil, err
	}
	r.resAddr = res.Addr()
	rep := &Report{Config: r.cfg, Started: time.Now()}
	for i := 0; i < r.cfg.Workers; i++ {
		if err := r.startWorker(r.resAddr); err != nil {
			r.stopAll()
			res.Close()
			return nil, err
		}
	}
	r.schedule(ctx, res)
	r.mu.Lock()
	r.armed = "" // no new fault once the schedule ended
	r.mu.Unlock()
	r.applied.Wait()
	r.stopAll()
	res.Close()
	rep.Elapsed = time.Since(rep.Started)
	rep.Workers = r.nextID
	rep.Faults = r.faults

	var h History
	h.Faults = r.faults
	for id := 0; id < r.nextID; id++ {
		if err := readFile(filepath.Join(r.hist, fmt.Sprintf("worker-%d.jsonl", id)), h.ReadEvents); err != nil {
			return nil, err
		}
	}
	rlog.Sync()
	if err := readFile(rlog.Name(), h.ReadWrites); err != nil {
		return nil, err
	}
	if b, err := json.Marshal(r.faults); err == nil {
		os.WriteFile(filepath.Join(r.hist, "faults.json"), b, 0o644)
	}
	rep.Result = Check(h)
	rep.history = h
	html := ""
	if len(rep.Result.Grants) <= maxVisualized {
		html = filepath.Join(r.cfg.Out, "history.html")
	}
	rep.Porcupine, err = Porcupine(rep.Result.Grants, rep.Result.Limit, 30*time.Second, html)
	if err != nil {
		rep.Porcupine += " (visualization: " + err.Error() + ")"
	}
	return rep, nil
}

func readFile(path string, read func(io.Reader) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a worker killed before it wrote anything
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := read(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (r *runner) startWorker(resource string) error {
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	url := r.cfg.URL
	if r.cfg.Mutate == MutateBrokenLock {
		url = "mem://"
	} else if r.net != nil {
		var err error
		if url, resource, err = r.net.forWorker(id, url, resource); err != nil {
			return fmt.Errorf("worker %d: %w", id, err)
		}
	}
	wc := WorkerConfig{
		ID: id, URL: url, Name: r.cfg.Name, TTL: r.cfg.TTL, Fair: r.cfg.Fair, Kind: r.cfg.Kind, Limit: r.cfg.Limit,
		Resource: resource, Hold: max(r.cfg.TTL/50, time.Millisecond), Seed: r.cfg.Seed,
		Events:     filepath.Join(r.hist, fmt.Sprintf("worker-%d.jsonl", id)),
		NoValidity: r.cfg.Mutate == MutateValidityOff,
	}
	if slices.Contains(r.cfg.Faults, FaultSkew) && id%2 == 1 {
		wc.Skew = r.cfg.Skew
		f := Fault{Kind: FaultSkew, Worker: id, Start: Now(), End: math.MaxInt64}
		if math.Abs(wc.Skew) > r.cfg.Drift {
			f.Outside, f.Label = true, fmt.Sprintf("clock skew %+.2f%% beyond Drift %.2f%%", 100*wc.Skew, 100*r.cfg.Drift)
		}
		r.record(f)
	}
	cmd := r.cfg.Command(wc)
	logf, err := os.Create(filepath.Join(r.hist, fmt.Sprintf("worker-%d.log", id)))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting worker %d: %w", id, err)
	}
	r.mu.Lock()
	r.procs[id] = cmd
	r.mu.Unlock()
	r.waits.Add(1)
	go func() {
		defer r.waits.Done()
		cmd.Wait()
		logf.Close()
		r.mu.Lock()
		delete(r.procs, id)
		r.mu.Unlock()
	}()
	return nil
}

// schedule arms a fault every 1-2 TTL (when the last one is over) until the run ends; the fault lands
// on the next worker to read the resource, which holds the lock then.
func (r *runner) schedule(ctx context.Context, res *Resource) {
	end := time.NewTimer(r.cfg.Duration)
	defer end.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	next := time.After(r.nextFault())
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
			// A progress line checks the whole history so far, which
			// takes seconds once a broken lock has made thousands of
			// violations; when the run's end came meanwhile, select
			// picked the tick again half of the time, and the run
			// overran its duration many times over.
			if time.Since(start) >= r.cfg.Duration {
				return
			}
			if r.cfg.Progress != nil {
				r.progress(res, time.Since(start))
			}
		case <-next:
			if len(r.scheduled) > 0 {
				r.mu.Lock()
				if !r.busy {
					// Every kind in turn, from a seeded start: a short run
					// still gets each.
					r.armed = r.scheduled[(r.faultN+r.faultStart)%len(r.scheduled)]
					r.faultN++
				}
				r.mu.Unlock()
			}
			next = time.After(r.nextFault())
		}
	}
}

// progress writes a line with the run's figures so far, checking the
// history recorded up to now. It counts only the violations the final
// check will count too (see CheckSoFar) and says how many it left for it.
func (r *runner) progress(res *Resource, elapsed time.Duration) {
	var h History
	r.mu.Lock()
	h.Faults = slices.Clone(r.faults)
	if r.live != nil {
		h.Faults = append(h.Faults, *r.live)
	}
	n := r.nextID
	now := Now() // with the faults: a fault recorded later starts after it
	r.mu.Unlock()
	for id := 0; id < n; id++ {
		readFile(filepath.Join(r.hist, fmt.Sprintf("worker-%d.jsonl", id)), h.ReadEvents)
	}
	c, provisional := CheckSoFar(h, now)
	writes, accepted := res.Counts()
	fmt.Fprintf(r.cfg.Progress, "verify: %v of %v: %d grants, %d writes (%d refused as stale), %d faults, violations (a) %d (b) %d so far",
		elapsed.Round(time.Second), r.cfg.Duration, len(c.Grants), writes, writes-accepted, len(h.Faults),
		c.Count(CheckPromise), c.Count(CheckOrder))
	if provisional > 0 {
		fmt.Fprintf(r.cfg.Progress, " (%d more to confirm at the end)", provisional)
	}
	fmt.Fprintln(r.cfg.Progress)
}

func (r *runner) nextFault() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.TTL + time.Duration(r.rng.Int64N(int64(r.cfg.TTL)))
}

// onRead applies an armed fault to the worker that just read the
// resource: it holds the lock and is between its read and its write.
func (r *runner) onRead(worker, pid int) {
	r.mu.Lock()
	kind := r.armed
	if kind == "" || r.stopped {
		r.mu.Unlock()
		return
	}
	r.armed, r.busy = "", true
	// Counted under r.mu, where the run disarms before it waits for
	// faults in progress: no fault starts after that wait began.
	r.applied.Add(1)
	cmd := r.procs[worker]
	pause := r.cfg.TTL*3/2 + time.Duration(r.rng.Int64N(int64(r.cfg.TTL)))
	r.mu.Unlock()
	if cmd == nil || cmd.Process.Pid != pid {
		r.mu.Lock()
		r.busy = false
		r.mu.Unlock()
		r.applied.Done()
		return
	}
	switch kind {
	case FaultKill:
		t := Now()
		cmd.Process.Signal(syscall.SIGKILL)
		r.record(Fault{Kind: FaultKill, Worker: worker, Start: t, End: t})
		// r.busy stays set until the new worker started.
		r.inProgress(func() { r.startWorker(r.resAddr) })
	case FaultLatency, FaultDrop, FaultCut, FaultSlowWrite:
		r.inProgress(func() {
			t := Now()
			f := Fault{Kind: kind, Worker: worker, Start: t}
			if err := r.net.apply(worker, kind, r.cfg.TTL); err != nil {
				f.Label = "not applied: " + err.Error()
			}
			f.End = Now()
			r.record(f)
		})
	case FaultServerPause, FaultServerKill, FaultServerCut, FaultFailover:
		r.inProgress(func() {
			why := r.cfg.Local.outside[kind]
			// Shown to the progress line while it lasts: a violation it
			// causes may be labelled outside the assumptions at the end.
			r.mu.Lock()
			t := Now()
			r.live = &Fault{Kind: kind, Worker: -1, Start: t, End: math.MaxInt64, Outside: why != "", Label: why}
			r.mu.Unlock()
			what, err := r.cfg.Local.apply(kind, r.cfg.TTL)
			f := Fault{Kind: kind, Worker: -1, Start: t, End: Now(), Label: what}
			if err != nil {
				f.Label += " (not fully applied: " + err.Error() + ")"
			}
			if why != "" {
				f.Outside, f.Label = true, why
			}
			r.record(f)
		})
	case FaultPause:
		t := Now()
		cmd.Process.Signal(syscall.SIGSTOP)
		r.inProgress(func() {
			time.Sleep(pause)
			cmd.Process.Signal(syscall.SIGCONT)
			r.record(Fault{Kind: FaultPause, Worker: worker, Start: t, End: Now()})
		})
	default: // not a scheduled kind
		r.inProgress(func() {})
	}
}

// inProgress runs the rest of a fault (a pause's SIGCONT, a server's
// restart) in the background and clears r.busy when it is done. The run
// waits for it (r.applied, counted by onRead) before it stops: a run must
// not end with a server still killed or a failover under way, or the next
// run on the same servers starts against a store that is not there.
func (r *runner) inProgress(f func()) {
	go func() {
		defer r.applied.Done()
		f()
		r.mu.Lock()
		r.busy = false
		r.mu.Unlock()
	}()
}

func (r *runner) record(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.live = nil
	r.mu.Unlock()
}

// stopAll ends every worker: SIGCONT (a paused one), SIGTERM so that it
// unlocks, SIGKILL after TTL + 5 s.
func (r *runner) stopAll() {
	r.mu.Lock()
	r.stopped = true
	procs := make([]*exec.Cmd, 0, len(r.procs))
	for _, c := range r.procs {
		procs = append(procs, c)
	}
	r.mu.Unlock()
	for _, c := range procs {
		c.Process.Signal(syscall.SIGCONT)
		c.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { r.waits.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.TTL + 5*time.Second):
		r.mu.Lock()
		for _, c := range r.procs {
			c.Process.Kill()
		}
		r.mu.Unlock()
		<-done
	}
	if r.net != nil {
		r.net.close()
	}
}

// Summary is the one-paragraph verdict of a report.
func (rep *Report) Summary() string {
	res := rep.Result
	var b strings.Builder
	verdict := "PASS"
	if res.Failed() {
		verdict = "FAIL"
	}
	kind := ""
	if res.Kind != KindMutex && res.Kind != "" {
		kind = " (" + describeKind(res.Kind, res.Limit) + ")"
	}
	fmt.Fprintf(&b, "%s: %d grants%s by %d workers in %v, %d faults; violations (a) %d, (b) %d, (c) %d",
		verdict, len(res.Grants), kind, rep.Workers, rep.Elapsed.Round(time.Millisecond), len(rep.Faults),
		res.Count(CheckPromise), res.Count(CheckOrder), res.Count(CheckFence))
	if n := res.Labelled(CheckPromise) + res.Labelled(CheckOrder) + res.Labelled(CheckFence); n > 0 {
		fmt.Fprintf(&b, " (+%d outside the backend's assumptions, labelled)", n)
	}
	fmt.Fprintf(&b, "; raw overlaps %d; writes %d, refused as stale %d, lost updates %d",
		res.Count(CheckOverlap), res.Writes, res.Writes-res.Accepted, res.LostUpdates)
	if len(res.KillToGrant) > 0 {
		fmt.Fprintf(&b, "; kill to next grant p50 %v p99 %v max %v",
			Percentile(res.KillToGrant, 50).Round(time.Millisecond), Percentile(res.KillToGrant, 99).Round(time.Millisecond),
			slices.Max(res.KillToGrant).Round(time.Millisecond))
	}
	return b.String()
}

// describeKind names a run's kind for the report: "semaphore of 3".
func describeKind(kind string, limit int) string {
	if kind == KindSemaphore {
		return fmt.Sprintf("semaphore of %d", limit)
	}
	return dlock.Shape(libKind(kind), limit)
}

package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// WorkerConfig is what one worker process is told.
type WorkerConfig struct {
	ID       int
	URL      string
	Name     string
	TTL      time.Duration
	Fair     bool
	Kind     string        // KindMutex ("" too), KindSemaphore, KindRW or KindElection
	Limit    int           // a semaphore's limit
	Resource string        // the resource's address
	Hold     time.Duration // the longest time between a read and its write
	Seed     uint64
	Events   string  // the file the worker appends its events to
	Skew     float64 // the worker's clock runs at 1+Skew times real time (0: the system clock)
	// NoValidity is the validity-off mutation: the worker reports its
	// grants as valid forever and never as lost, as a library without a
	// validity deadline would.
	NoValidity bool
}

// RunWorker contends for the lock until ctx ends: each grant reads the
// counter, waits up to Hold, writes counter+1 with the token and unlocks.
// It writes its events to events as JSON lines. It checks the lease once,
// before the read; the write goes out without a second check, as a real
// program's would after a pause it did not notice, and the fence must stop
// it. A read-write lock's worker is a writer one time in four (drawn from
// the seed), and a reader does a fenced shared read instead; a
// semaphore's permit holder only waits, since a single token cannot fence
// N holders at once.
func RunWorker(ctx context.Context, cfg WorkerConfig, events io.Writer) error {
	rec := &recorder{w: events, worker: cfg.ID, noValidity: cfg.NoValidity}
	res, err := dialResource(cfg)
	if err != nil {
		return err
	}
	defer res.Close()
	var copts []dlock.Option
	if cfg.Skew != 0 {
		rec.clock = newSkewClock(1 + cfg.Skew)
		copts = append(copts, dlock.WithClock(rec.clock))
	}
	c, err := dlock.Open(ctx, cfg.URL, copts...)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID)))
	lk := newLocker(c, cfg, rng)
	for ctx.Err() == nil {
		op := lk.next()
		rec.event(Event{Op: OpAcquire, Phase: Invoke, Kind: lk.kind, Weight: op.weight, Limit: lk.limit})
		lctx, cancel := context.WithTimeout(ctx, 4*cfg.TTL)
		lease, err := op.acquire(lctx)
		cancel()
		if err != nil {
			rec.event(Event{Op: OpAcquire, Phase: Fail, Err: err.Error()})
			if errors.Is(err, dlock.ErrInvalidOption) {
				return err // the backend refuses the kind: retrying will not help
			}
			if ctx.Err() == nil && !errors.Is(err, dlock.ErrNotAcquired) {
				time.Sleep(cfg.TTL / 10) // the store is down: do not spin
			}
			continue
		}
		rec.granted(lease, lk.kind, op.weight, lk.limit)
		stop := rec.watch(lease, cfg.TTL)
		if rec.noValidity || lease.Err() == nil {
			hold := time.Duration(rng.Int64N(int64(cfg.Hold) + 1))
			if err := op.work(res, rec, lease.Token(), hold); err != nil {
				stop()
				return err
			}
		}
		stop()
		rec.event(Event{Op: OpRelease, Phase: Invoke, Token: lease.Token()})
		uctx, cancel := context.WithTimeout(context.Background(), cfg.TTL)
		err = op.release(uctx, lease)
		cancel()
		if err != nil {
			rec.event(Event{Op: OpRelease, Phase: Fail, Token: lease.Token(), Err: err.Error()})
		} else {
			rec.event(Event{Op: OpRelease, Phase: OK, Token: lease.Token()})
		}
	}
	return nil
}

// locker makes a worker's acquisitions of its kind.
type locker struct {
	kind  string // "" for a mutex: its events stay as they were
	limit int
	rng   *rand.Rand
	mu    *dlock.Mutex
	sem   *dlock.Semaphore
	rw    *dlock.RWMutex
	el    *dlock.Election
	value string
}

// lockOp is one acquisition: how to take it, what to do holding it, how to
// give it back.
type lockOp struct {
	weight  int
	acquire func(context.Context) (*dlock.Lease, error)
	work    func(rc *resourceConn, rec *recorder, token uint64, hold time.Duration) error
	release func(context.Context, *dlock.Lease) error
}

func newLocker(c *dlock.Client, cfg WorkerConfig, rng *rand.Rand) *locker {
	opts := []dlock.Option{dlock.TTL(cfg.TTL)}
	lk := &locker{kind: cfg.Kind, rng: rng}
	switch cfg.Kind {
	case KindSemaphore:
		lk.limit = cfg.Limit
		lk.sem = c.Semaphore(cfg.Name, cfg.Limit, opts...)
	case KindRW:
		lk.limit = dlock.RWLimit
		lk.rw = c.RWMutex(cfg.Name, opts...)
	case KindElection:
		lk.limit = 1
		lk.el = c.Election(cfg.Name, opts...)
		lk.value = fmt.Sprintf("worker-%d", cfg.ID)
	default:
		lk.kind = ""
		if cfg.Fair {
			opts = append(opts, dlock.Fair())
		}
		lk.mu = c.Mutex(cfg.Name, opts...)
	}
	return lk
}

func unlock(ctx context.Context, l *dlock.Lease) error { return l.Unlock(ctx) }

func (lk *locker) next() lockOp {
	increment := (*resourceConn).increment
	switch {
	case lk.sem != nil:
		return lockOp{weight: 1, acquire: lk.sem.Acquire, work: (*resourceConn).hold, release: unlock}
	case lk.rw != nil && lk.rng.IntN(4) == 0:
		return lockOp{weight: dlock.RWLimit, acquire: lk.rw.Lock, work: increment, release: unlock}
	case lk.rw != nil:
		return lockOp{weight: 1, acquire: lk.rw.RLock, work: (*resourceConn).sharedRead, release: unlock}
	case lk.el != nil:
		return lockOp{weight: 1,
			acquire: func(ctx context.Context) (*dlock.Lease, error) { return lk.el.Campaign(ctx, lk.value) },
			work:    increment,
			release: func(ctx context.Context, _ *dlock.Lease) error { return lk.el.Resign(ctx) }}
	}
	return lockOp{acquire: lk.mu.Lock, work: increment, release: unlock}
}

// recorder writes a worker's events.
type recorder struct {
	mu         sync.Mutex
	w          io.Writer
	worker     int
	noValidity bool
	clock      *skewClock // nil: the system clock
}

func (r *recorder) event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.T == 0 {
		e.T = Now()
	}
	e.Worker = r.worker
	b, _ := json.Marshal(e)
	r.w.Write(append(b, '\n'))
}

// deadline converts the lease's deadline to CLOCK_MONOTONIC.
func (r *recorder) deadline(l *dlock.Lease) int64 {
	if r.noValidity {
		return math.MaxInt64
	}
	if r.clock != nil {
		// The client's belief, in real time: its clock reaches the
		// deadline after this much real time.
		return Now() + int64(r.clock.untilReal(l.Deadline()))
	}
	return Now() + int64(time.Until(l.Deadline()))
}

func (r *recorder) granted(l *dlock.Lease, kind string, weight, limit int) {
	r.event(Event{Op: OpAcquire, Phase: OK, Token: l.Token(), Deadline: r.deadline(l), Kind: kind, Weight: weight, Limit: limit})
}

// watch records every move of the lease's deadline and its loss until
// stop is called.
func (r *recorder) watch(l *dlock.Lease, ttl time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := l.Deadline()
		tick := time.NewTicker(max(ttl/50, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-l.Done():
				if !r.noValidity {
					r.event(Event{Op: OpLost, Phase: OK, Token: l.Token(), Err: fmt.Sprint(l.Err())})
				}
				<-done
				return
			case <-tick.C:
				if d := l.Deadline(); d.After(last) {
					last = d
					r.event(Event{Op: OpRenew, Phase: OK, Token: l.Token(), Deadline: r.deadline(l)})
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// resourceConn is a worker's connection to the resource.
type resourceConn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialResource(cfg WorkerConfig) (*resourceConn, error) {
	c, err := net.DialTimeout("tcp", cfg.Resource, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("worker %d: the resource: %w", cfg.ID, err)
	}
	rc := &resourceConn{c: c, rd: bufio.NewReader(c)}
	if _, err := rc.call(fmt.Sprintf("HELLO %d %d", cfg.ID, os.Getpid())); err != nil {
		c.Close()
		return nil, err
	}
	return rc, nil
}

func (rc *resourceConn) Close() error { return rc.c.Close() }

func (rc *resourceConn) call(req string) (string, error) {
	if _, err := io.WriteString(rc.c, req+"\n"); err != nil {
		return "", fmt.Errorf("the resource: %w", err)
	}
	line, err := rc.rd.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("the resource: %w", err)
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "ERR") {
		return "", fmt.Errorf("the resource: %s", line)
	}
	return line, nil
}

// increment reads the counter, waits, and writes it plus one with token.
func (rc *resourceConn) increment(rec *recorder, token uint64, hold time.Duration) error {
	s, err := rc.call(fmt.Sprintf("READ %d", token))
	if err != nil || s == "STALE" {
		return err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("the resource: bad value %q", s)
	}
	time.Sleep(hold)
	rec.event(Event{Op: OpWrite, Phase: Invoke, Token: token, Read: v, Value: v + 1})
	reply, err := rc.call(fmt.Sprintf("WRITE %d %d %d", token, v, v+1))
	switch {
	case err != nil:
		rec.event(Event{Op: OpWrite, Phase: Unknown, Token: token, Err: err.Error()})
	case reply == "OK":
		rec.event(Event{Op: OpWrite, Phase: OK, Token: token, Read: v, Value: v + 1})
	default:
		rec.event(Event{Op: OpWrite, Phase: Fail, Token: token, Err: reply})
	}
	return err
}

// sharedRead is a reader's hold: a fenced shared read, then the wait.
func (rc *resourceConn) sharedRead(rec *recorder, token uint64, hold time.Duration) error {
	if _, err := rc.call(fmt.Sprintf("SHARED %d", token)); err != nil {
		return err
	}
	time.Sleep(hold)
	return nil
}

// hold is a permit holder's hold: it tells the resource (so that a fault
// can find it inside its hold) and waits. Nothing is fenced.
func (rc *resourceConn) hold(rec *recorder, token uint64, hold time.Duration) error {
	if _, err := rc.call("HOLD"); err != nil {
		return err
	}
	time.Sleep(hold)
	return nil
}

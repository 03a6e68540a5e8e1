package dlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/redact"
)

// Client is a connection to one lock backend. It owns the backend, the
// renewal loop of all leases taken through it and every goroutine it
// started; Close stops and waits for all of them. A Client is safe for
// concurrent use.
type Client struct {
	b     Backend
	desc  string
	epoch time.Time // the origin of its instants
	cfg   config
	batch BatchRenewer // nil when the backend cannot batch

	// closing is cancelled by Close so that waiting Locks give up.
	closing context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup // Lock, TryLock, Unlock, Extend in progress
	bg     sync.WaitGroup // backend calls left running by bounded
	keeper *keeper
}

// New returns a Client over backend b. The options set defaults for every
// Mutex of the client (TTL, Fair, MaxHold, OnWait) and the client's own
// settings (WithClock, WithLogger, Namespace, Drift); Owner is a Mutex
// option and is refused here. The Client owns b: Close closes it.
func New(b Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, &Error{Op: "new", Kind: ErrInvalidOption, Err: errors.New("nil backend")}
	}
	cfg := defaultConfig()
	cfg.applyAll(opts)
	if err := cfg.check(true); err != nil {
		return nil, &Error{Op: "new", Backend: b.String(), Kind: ErrInvalidOption, Err: err}
	}
	c := &Client{b: b, desc: b.String(), cfg: cfg, epoch: cfg.clock.Now()}
	c.batch, _ = b.(BatchRenewer)
	c.closing, c.cancel = context.WithCancel(context.Background())
	c.keeper = newKeeper(c)
	if lr, ok := b.(LossReporter); ok {
		lr.ReportLoss(c.keeper.lost)
	}
	return c, nil
}

// OpenFunc opens a backend from a URL; backends register one per scheme.
type OpenFunc func(ctx context.Context, u *url.URL) (Backend, error)

var registry struct {
	sync.RWMutex
	m map[string]OpenFunc
}

// Register makes a backend available to Open under a URL scheme. Backend
// packages call it from init, as database/sql drivers do. It panics if the
// scheme is registered twice or open is nil.
func Register(scheme string, open OpenFunc) {
	registry.Lock()
	defer registry.Unlock()
	if open == nil {
		panic("dlock: Register of a nil OpenFunc for " + scheme)
	}
	if _, dup := registry.m[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	if registry.m == nil {
		registry.m = make(map[string]OpenFunc)
	}
	registry.m[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open opens a Client on the backend named by rawURL, e.g.
// "sqlite:///var/lib/app/locks.db", "redis://127.0.0.1:6379/0" or "mem://".
// The package of the backend must be imported (for its side effect of
// registering the scheme). The options are those of [New]. ctx bounds the
// connection set-up only, and so does the URL's connect_timeout parameter,
// which every backend of this module takes (see [DefaultConnectTimeout]).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, which may carry a password
		}
		return nil, &Error{Op: "open", Kind: ErrInvalidOption, Err: fmt.Errorf("malformed URL: %w", err)}
	}
	if u.Scheme == "" {
		return nil, &Error{Op: "open", Kind: ErrInvalidOption, Err: fmt.Errorf("URL %q has no scheme (want one of %s)", redact.URL(u), strings.Join(Schemes(), ", "))}
	}
	registry.RLock()
	open := registry.m[u.Scheme]
	registry.RUnlock()
	if open == nil {
		return nil, &Error{Op: "open", Kind: ErrInvalidOption, Err: fmt.Errorf("unknown URL scheme %q (registered: %s; is the backend package imported?)", u.Scheme, strings.Join(Schemes(), ", "))}
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, &Error{Op: "open", Backend: u.Scheme + " " + redact.URL(u), Kind: kindOf(err), Err: err}
	}
	c, err := New(b, opts...)
	if err != nil {
		b.Close()
		return nil, err
	}
	return c, nil
}

// MaxTTL returns the longest TTL the client's backend accepts: what the
// backend says if it is a [TTLLimiter], otherwise the package's [MaxTTL].
func (c *Client) MaxTTL() time.Duration {
	if tl, ok := c.b.(TTLLimiter); ok {
		if m := tl.MaxTTL(); m > 0 {
			return m
		}
	}
	return MaxTTL
}

// checkTTL refuses a TTL the backend cannot keep exactly.
func (c *Client) checkTTL(ttl time.Duration) error {
	if max := c.MaxTTL(); ttl > max {
		return fmt.Errorf("TTL %v is above the maximum %v of %s", ttl, max, c.desc)
	}
	return nil
}

// Backend returns the client's backend.
func (c *Client) Backend() Backend { return c.b }

// String describes the client's backend.
func (c *Client) String() string { return c.desc }

// Mutex returns the lock called name. No request is made until Lock or
// TryLock; an invalid name or option is reported by them. The options
// override the client's defaults for this Mutex.
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	m := &Mutex{spec{c: c, name: name, cfg: c.cfg, kind: KindMutex, limit: 1, weight: 1}}
	m.cfg.clientOnly, m.cfg.mutexOnly, m.cfg.errs = nil, nil, nil
	m.cfg.applyAll(opts)
	if m.cfg.weight != 0 {
		m.cfg.errs.Check(false, "Weight is a Semaphore option: a mutex weighs 1")
	}
	return m
}

// Inspect lists the locks held on the backend whose names start with
// prefix, with names shown without their namespace (in
// [LockInfo.Namespace]). A Client with a [Namespace] lists the locks of its
// namespace only; one without lists every lock, those of any namespace
// included when prefix is "". It needs a backend that implements
// [Inspector].
func (c *Client) Inspect(ctx context.Context, prefix string) ([]LockInfo, error) {
	in, ok := c.b.(Inspector)
	if !ok {
		return nil, &Error{Op: "inspect", Backend: c.desc, Err: errors.ErrUnsupported}
	}
	if err := c.begin(); err != nil {
		return nil, &Error{Op: "inspect", Backend: c.desc, Kind: ErrClosed}
	}
	defer c.ops.Done()
	ns := c.cfg.namespace
	enc := ""
	if ns != "" || prefix != "" {
		enc = encodeKey(ns, prefix)
	}
	limit := newGrace(ctx)
	defer limit.release()
	infos, err := bounded(c, limit, ctx, func(ctx context.Context) ([]LockInfo, error) {
		return in.Inspect(ctx, enc)
	}, nil)
	if err != nil {
		return nil, &Error{Op: "inspect", Backend: c.desc, Kind: kindOf(err), Err: err}
	}
	out := infos[:0]
	for _, info := range infos {
		kns, name, _ := decodeKey(info.Name)
		if kns != ns && ns != "" {
			continue // a backend whose prefix match is looser than asked
		}
		info.Namespace, info.Name = kns, name
		if info.Kind == KindMutex && info.Limit == 0 && info.Bad == "" {
			info.Limit, info.Weight = 1, 1 // a mutex is 1 of 1, whether or not the backend says so
		}
		out = append(out, info)
	}
	return out, nil
}

// begin registers an operation in progress, or reports that the client is
// closed.
func (c *Client) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.ops.Add(1)
	return nil
}

// Close ends the client: waiting Lock calls return [ErrClosed], the renewal
// loop stops, every lease still held is released on the backend and reports
// loss (its Err matches both [ErrLeaseLost] and [ErrClosed]), and the backend
// is closed. Close waits for all of it, but returns within [CloseTimeout]
// plus [CancelGrace] whatever the store does: a release that gets no answer
// in time is left to the lease's TTL, and the error says what did not end.
// It returns the errors of releases that failed and of closing the backend;
// a second Close returns ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return &Error{Op: "close", Backend: c.desc, Kind: ErrClosed}
	}
	c.closed = true
	c.mu.Unlock()
	// The bound is real time, not the injectable clock's.
	deadline := time.Now().Add(CloseTimeout)
	var errs []error
	var mu sync.Mutex
	failed := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	noAnswer := func(what string) {
		failed(&Error{Op: "close", Backend: c.desc, Kind: ErrBackendUnavailable,
			Err: fmt.Errorf("%s did not end in time; left running", what)})
	}

	c.cancel()
	// Waiting Locks end by CancelGrace after the cancel; Unlock and Extend
	// under contexts that never end get as long as a release.
	if !waitTimeout(&c.ops, releaseTimeout) {
		noAnswer("an Unlock or Extend in progress")
	}
	held := c.keeper.stop()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, l := range held {
		if !l.endHold(&Error{Op: "lease", Name: l.Name(), Backend: c.desc, Kind: ErrLeaseLost, Err: ErrClosed}, EndClosed, false) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), min(time.Until(deadline), releaseTimeout))
			defer cancel()
			limit := newGrace(ctx)
			defer limit.release()
			err := l.release(limit, ctx, true)
			if err != nil && !errors.Is(err, ErrLeaseLost) {
				failed(&Error{Op: "unlock", Name: l.Name(), Backend: c.desc, Kind: kindOf(err), Err: err})
			}
		}()
	}
	wg.Wait()
	if !waitTimeout(&c.bg, time.Until(deadline)) {
		noAnswer("a backend call abandoned after its context ended")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.b.Close() }()
	t := time.NewTimer(max(time.Until(deadline), 0) + CancelGrace)
	defer t.Stop()
	select {
	case err := <-closed:
		if err != nil {
			errs = append(errs, &Error{Op: "close", Backend: c.desc, Kind: kindOf(err), Err: err})
		}
	case <-t.C:
		noAnswer("closing the backend")
	}
	return errors.Join(errs...)
}

// releaseTimeout bounds the releases that Close and MaxHold do on their own.
const releaseTimeout = CloseTimeout / 2

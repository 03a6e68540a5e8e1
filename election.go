package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// MaxValueLen is the longest value a leader may publish, in bytes.
const MaxValueLen = 4096

// ErrNoLeader means an election has no leader now. [Election.Leader]
// returns it (wrapped, naming the election and the backend).
var ErrNoLeader error = &sentinel{"no leader"}

// Leader is an election's leader as the store sees it. The zero Owner means
// no leader.
type Leader struct {
	Owner string // the leader's owner id; "" when there is no leader
	Value string // what the leader published with Campaign or Proclaim
	Term  uint64 // the leader's lease token: strictly increasing across leaders
	// Err is set when the store could not be read or followed (Observe
	// goes on and reports the leader again once it can), or, on the last
	// Leader before Observe's channel closes, why it ended.
	Err error
}

// Election is a named leader election of a Client: a mutex whose holder,
// the leader, publishes a value, and whose changes can be observed. The
// leader's lease is a Lease like any other — renewed by the Client, lost
// loudly (Done, Err and Context tell the leader before any other candidate
// can be elected, by the Deadline promise), fenced by its token, which is
// the term.
//
// Candidates are elected in the order they campaigned. An Election holds
// at most one campaign of its own at a time; use one Election per
// candidate.
type Election struct {
	spec
	mu   sync.Mutex
	lead *Lease // the lease of this Election's campaign, while it may lead
}

// Election returns the election called name. No request is made until a
// call; an invalid name or option is reported by it, as is a backend that
// cannot hold elections (see [Granter]).
func (c *Client) Election(name string, opts ...Option) *Election {
	e := &Election{spec: spec{c: c, name: name, cfg: c.cfg, kind: KindElection, limit: 1, weight: 1}}
	e.cfg.clientOnly, e.cfg.mutexOnly, e.cfg.errs = nil, nil, nil
	e.cfg.applyAll(opts)
	if e.cfg.weight != 0 {
		e.cfg.errs.Check(false, "Weight is a Semaphore option")
	}
	return e
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

func (e *Election) fail(op string, kind, err error) error {
	return &Error{Op: op, Name: e.name, Backend: e.c.desc, Kind: kind, Err: err}
}

func checkValue(value string) error {
	switch {
	case value == "":
		return errors.New("the value is empty")
	case len(value) > MaxValueLen:
		return fmt.Errorf("the value is %d bytes, longer than %d", len(value), MaxValueLen)
	case !utf8.ValidString(value):
		return errors.New("the value is not valid UTF-8")
	}
	return nil
}

// leading returns the Election's lease while it is valid.
func (e *Election) leading() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead != nil && e.lead.Err() != nil {
		e.lead = nil
	}
	return e.lead
}

// Campaign blocks until this candidate leads, publishing value (1 to
// [MaxValueLen] bytes of UTF-8), or until ctx ends, as [Mutex.Lock] does:
// woken when the leader resigns or its lease runs out, and leaving nothing
// behind when ctx ends. The lease's token is the term. Campaign never
// returns a lease that is already lost. Campaigning again while this
// Election leads is [ErrInvalidOption].
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if err := checkValue(value); err != nil {
		return nil, e.fail("campaign", ErrInvalidOption, err)
	}
	if e.leading() != nil {
		return nil, e.fail("campaign", ErrInvalidOption, errors.New("this Election already leads; Resign first"))
	}
	l, err := e.acquire(ctx, "campaign", true, value)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lead = l
	e.mu.Unlock()
	return l, nil
}

// Proclaim replaces the leader's published value without giving up
// leadership. It is [ErrInvalidOption] when this Election does not lead,
// and [ErrLeaseLost] when its lease turns out to be lost.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return e.fail("proclaim", ErrInvalidOption, err)
	}
	l := e.leading()
	if l == nil {
		return e.fail("proclaim", ErrInvalidOption, errors.New("this Election does not lead"))
	}
	p, ok := e.c.b.(Proclaimer)
	if !ok {
		return e.fail("proclaim", ErrInvalidOption, fmt.Errorf("%w: the backend cannot change a value", errors.ErrUnsupported))
	}
	limit, err := e.c.enter(ctx)
	if err != nil {
		return e.fail("proclaim", ErrClosed, nil)
	}
	defer e.c.leave(limit)
	h := l.hold()
	err = bounded0(e.c, limit, ctx, func(ctx context.Context) error { return p.Proclaim(ctx, h, value) }, nil)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			l.mu.Lock()
			l.endLocked(ErrLeaseLost, err, EndRenewalRefused, false, true)
			l.unlock()
		}
		return e.fail("proclaim", kindOf(err), err)
	}
	return nil
}

// Resign gives up leadership (it unlocks the lease): the next candidate is
// woken and leads at once. It is [ErrInvalidOption] when this Election
// does not lead.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lead
	e.lead = nil
	e.mu.Unlock()
	if l == nil {
		return e.fail("resign", ErrInvalidOption, errors.New("this Election does not lead"))
	}
	return l.Unlock(ctx)
}

// Leader returns the current leader, or an error matching [ErrNoLeader]
// when there is none. It needs a backend that implements [Inspector].
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	in, ok := e.c.b.(Inspector)
	if !ok {
		return Leader{}, e.fail("leader", ErrInvalidOption, fmt.Errorf("%w: the backend cannot list holders", errors.ErrUnsupported))
	}
	if msg := validName(e.name, MaxNameLen); msg != "" {
		return Leader{}, e.fail("leader", ErrInvalidName, fmt.Errorf("name %s", msg))
	}
	if err := e.c.begin(); err != nil {
		return Leader{}, e.fail("leader", ErrClosed, nil)
	}
	defer e.c.ops.Done()
	w := watchLoop{c: e.c, in: in, name: e.name, key: encodeKey(e.c.cfg.namespace, e.name)}
	infos, err := w.read(ctx)
	if err != nil {
		return Leader{}, e.fail("leader", kindOf(err), err)
	}
	ld, err := leaderOf(infos)
	if err != nil {
		return Leader{}, e.fail("leader", ErrInvalidOption, err)
	}
	if ld.Owner == "" {
		return Leader{}, e.fail("leader", ErrNoLeader, nil)
	}
	return ld, nil
}

// leaderOf returns the leader among a name's holders; a name held as
// another kind is an error.
func leaderOf(infos []LockInfo) (Leader, error) {
	for _, li := range infos {
		if li.Kind != KindElection {
			return Leader{}, &ConflictError{Kind: li.Kind, Limit: li.Limit, AskedKind: KindElection, AskedLimit: 1}
		}
	}
	if len(infos) == 0 {
		return Leader{}, nil
	}
	li := infos[len(infos)-1]
	return Leader{Owner: li.Owner, Value: li.Value, Term: li.Token}, nil
}

// Observe follows the leader: it sends the leader now, then every change
// — a new leader, a new value, and "no leader" (the zero Owner) when the
// leader resigned or its lease ran out — in order, until ctx ends or the
// Client closes; then the channel closes. A slow reader sees changes
// merged (the channel holds only the latest), never reordered, and never
// a term older than one already sent. A name used as another kind ends
// the channel with a Leader whose Err matches [ErrInvalidOption].
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	send := func(ld Leader) {
		select {
		case <-out:
		default:
		}
		out <- ld
	}
	ctx, cancel := context.WithCancel(ctx)
	hs, err := e.c.Watch(ctx, e.name)
	if err != nil {
		cancel()
		send(Leader{Err: err})
		close(out)
		return out
	}
	go func() {
		defer close(out)
		defer cancel()
		var last Leader
		sent := false
		for h := range hs {
			if h.Err != nil {
				send(Leader{Err: h.Err})
				sent = false
				continue
			}
			ld, err := leaderOf(h.Holders)
			if err != nil {
				send(Leader{Err: e.fail("observe", ErrInvalidOption, err)})
				cancel()
				for range hs { // the watch ends with its ctx
				}
				return
			}
			if ld.Term != 0 && ld.Term < last.Term {
				continue // a stale read: never older than what was sent
			}
			if sent && ld.Owner == last.Owner && ld.Term == last.Term && ld.Value == last.Value {
				continue
			}
			if ld.Term > last.Term {
				last.Term = ld.Term
			}
			last.Owner, last.Value = ld.Owner, ld.Value
			sent = true
			send(ld)
		}
	}()
	return out
}

// Callbacks are told what a [Election.Run] sees. Each may be nil; none may
// block for long (they run on Run's goroutines).
type Callbacks struct {
	// StartedLeading is called when this candidate starts to lead, before
	// the function runs.
	StartedLeading func(l *Lease)
	// StoppedLeading is called after the function returned and the lease
	// was released (or found lost).
	StoppedLeading func(l *Lease, err error)
	// NewLeader is called for each change of leader elsewhere (another
	// owner, or none) while Run runs.
	NewLeader func(Leader)
}

// Run runs fn while this candidate leads, as client-go's LeaderElector
// does, but safely: it campaigns with value, runs fn under a context that
// is cancelled when leadership is lost (or ctx ends), waits for fn to
// return before it releases the lease — so two leaders' functions never
// run at once as far as the lease can tell — and then campaigns again,
// unless ctx ended or fn returned an error, which Run then returns. A fn
// that ends because leadership was lost is not an error: Run campaigns
// again. Give fn's work the lease's token to fence it.
func (e *Election) Run(ctx context.Context, value string, cb Callbacks, fn func(ctx context.Context, l *Lease) error) error {
	if cb.NewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ld := range e.Observe(octx) {
				if ld.Err == nil && (ld.Owner == "" || e.leading() == nil || ld.Owner != e.leading().Owner()) {
					cb.NewLeader(ld)
				}
			}
		}()
	}
	for {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if cb.StartedLeading != nil {
			cb.StartedLeading(l)
		}
		fctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(l.Context(), cancel)
		ferr := fn(fctx, l)
		stop()
		cancel()
		lost := l.Err()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		rerr := e.Resign(rctx)
		rcancel()
		if lost != nil {
			rerr = lost
		}
		if cb.StoppedLeading != nil {
			cb.StoppedLeading(l, rerr)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case ferr != nil && lost == nil && !errors.Is(ferr, context.Canceled):
			return ferr
		}
	}
}

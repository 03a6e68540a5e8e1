package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
)

// Holders is one state of a watched name: its holders as the store sees
// them (none when the name is free), or an error.
type Holders struct {
	Name    string
	Holders []LockInfo // one per holder, in token order; TTL as of the read
	// Err is set when the store could not be read or followed: the watch
	// goes on trying and, once it can, sends the holders again, so what
	// changed meanwhile is reported.
	Err error
}

// watchPoll is how often a watch reads a backend that cannot push changes
// (it implements no [Watcher]); backends that push are read only when
// they signal, or when a holder's lease runs out.
const watchPoll = time.Second

// Watch follows the holders of name: it sends them now, then after each
// change (a grant, a release, an expiry, a new value), until ctx ends or
// the Client closes, and then closes the channel. Changes are pushed by
// the store where the backend can (see [Watcher]); expiries are noticed
// when the first holder's TTL runs out. A slow reader sees changes merged
// — the channel holds only the latest state, after the last error if the
// store was out of reach meanwhile — but never out of order. It needs a
// backend that implements [Inspector].
func (c *Client) Watch(ctx context.Context, name string) (<-chan Holders, error) {
	fail := func(kind, err error) (<-chan Holders, error) {
		return nil, &Error{Op: "watch", Name: name, Backend: c.desc, Kind: kind, Err: err}
	}
	if msg := validName(name, MaxNameLen); msg != "" {
		return fail(ErrInvalidName, fmt.Errorf("name %s", msg))
	}
	in, ok := c.b.(Inspector)
	if !ok {
		return fail(ErrInvalidOption, fmt.Errorf("%w: the backend cannot list holders", errors.ErrUnsupported))
	}
	if err := c.begin(); err != nil {
		return fail(ErrClosed, nil)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.closing, cancel)
	out := make(chan Holders, 2)
	go func() {
		defer c.ops.Done()
		defer stop()
		defer cancel()
		defer close(out)
		w := watchLoop{c: c, in: in, name: name, key: encodeKey(c.cfg.namespace, name), out: out}
		w.run(ctx)
	}()
	return out, nil
}

type watchLoop struct {
	c         *Client
	in        Inspector
	name, key string
	out       chan Holders
	last      []LockInfo
	sent      bool
}

func (w *watchLoop) run(ctx context.Context) {
	var sub Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	var backoff time.Duration
	retry := func(err error) bool {
		w.send(Holders{Name: w.name, Err: &Error{Op: "watch", Name: w.name, Backend: w.c.desc, Kind: kindOf(err), Err: err}})
		w.sent = false // report the holders again once they can be read
		backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
		return dur.Sleep(ctx, backoff) == nil
	}
	for ctx.Err() == nil {
		if wt, ok := w.c.b.(Watcher); ok && sub == nil {
			s, err := wt.Watch(ctx, w.key)
			if err != nil {
				if ctx.Err() != nil || !retry(err) {
					return
				}
				continue
			}
			sub = s
		}
		infos, err := w.read(ctx)
		if err != nil {
			if ctx.Err() != nil || !retry(err) {
				return
			}
			continue
		}
		backoff = 0
		w.publish(infos)
		next := watchPoll
		if sub != nil {
			next = -1
		}
		for _, li := range infos {
			if li.TTL > 0 && (next < 0 || li.TTL < next) {
				next = li.TTL + 5*time.Millisecond // the store has expired it by then
			}
		}
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if next >= 0 {
			wctx, wcancel = context.WithTimeout(ctx, next)
		}
		if sub != nil {
			err = sub.Wait(wctx)
		} else {
			<-wctx.Done()
		}
		wcancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			sub.Close() // broken: subscribe again, then read what changed meanwhile
			sub = nil
			if !retry(err) {
				return
			}
		}
	}
}

// read returns the holders of the name, in token order.
func (w *watchLoop) read(ctx context.Context) ([]LockInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	infos, err := w.in.Inspect(rctx, w.key)
	if err != nil {
		return nil, err
	}
	out := infos[:0]
	for _, li := range infos {
		if li.Name == w.key {
			li.Name = w.name
			if li.Kind == KindMutex && li.Limit == 0 && li.Bad == "" {
				li.Limit, li.Weight = 1, 1
			}
			out = append(out, li)
		}
	}
	slices.SortFunc(out, func(a, b LockInfo) int {
		switch {
		case a.Token < b.Token:
			return -1
		case a.Token > b.Token:
			return 1
		}
		return 0
	})
	return out, nil
}

// publish sends infos if the holders differ from those sent last.
func (w *watchLoop) publish(infos []LockInfo) {
	if w.sent && sameHolders(w.last, infos) {
		return
	}
	w.last, w.sent = infos, true
	w.send(Holders{Name: w.name, Holders: infos})
}

// send queues h, replacing unread states: a slow reader gets the latest
// state, and an unread error before it (out holds two), so that it learns
// of an outage even when the watch has recovered since.
func (w *watchLoop) send(h Holders) {
	sendLatest(w.out, h, func(h Holders) bool { return h.Err != nil })
}

// sendLatest queues v on out (of capacity 2, whose only sender is the
// caller), dropping unread values but the last unread one that isErr says
// is an error, when v is not one.
func sendLatest[T any](out chan T, v T, isErr func(T) bool) {
	var keep *T
	for drained := false; !drained; {
		select {
		case x := <-out:
			if isErr(x) && !isErr(v) {
				keep = &x
			}
		default:
			drained = true
		}
	}
	if keep != nil {
		out <- *keep
	}
	out <- v
}

// sameHolders reports whether a and b name the same holds (TTLs aside).
func sameHolders(a, b []LockInfo) bool {
	return slices.EqualFunc(a, b, func(x, y LockInfo) bool {
		return x.Owner == y.Owner && x.Token == y.Token && x.Count == y.Count && x.Weight == y.Weight && x.Value == y.Value && x.Kind == y.Kind
	})
}

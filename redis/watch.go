package redis

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/redisconn"
)

// Watching a name ([Backend.Watch]): a watcher subscribes to the name's
// watch channel, PREFIX:{NAME}:watch, on a pub/sub connection of its own
// shared by all the Backend's watches (a second [notify.Hub], dialed with
// the first watch), and registers in PREFIX:{NAME}:watchers. The scripts
// publish a change only while that key exists (see watchedLua), so names
// nobody watches cost no PUBLISH.

var _ dlock.Watcher = (*Backend)(nil)

const (
	// watchTTL is how long a watcher's registration lasts without being
	// refreshed: a watcher that died leaves nothing after it.
	watchTTL = 60 * time.Second
	// watchRefresh is how often a waiting watcher refreshes it.
	watchRefresh = watchTTL / 3
)

// watchScript registers a watcher, refreshes its registration or removes
// it; registrations that ran out go first.
//
//	KEYS: the watchers zset, the lock's hash
//	ARGV: watcher id, ttl ms ("0": remove)
//
// The zset expires with its last registration, and is deleted when it
// has none. A registration writes x to a mutex hold that has none (its
// lease ends with the hash), so that its release takes the release
// script's full path, which publishes (releaseFast does not). Replies the
// number of watchers left.
var watchScript = newScript("watch", `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[2], 'o', 'x', 'f')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ttl > 0 then
  if cur[1] and cur[3] and not cur[2] then
    local p = redis.call('PTTL', KEYS[2])
    if p > 0 then redis.call('HSET', KEYS[2], 'x', now + p) end
  end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], tonumber(last[2])) end
return redis.call('ZCARD', KEYS[1])
`)

// watchPolicy wakes every watcher of a channel at each notice, and tells
// each one of a lost connection.
type watchPolicy struct{}

func (watchPolicy) Notice(_, _ string, ws []*watchSub) {
	for _, w := range ws {
		w.signal()
	}
}

func (watchPolicy) Retry(w *watchSub) {
	w.losses.Add(1)
	w.signal()
}

// watchHub returns the hub of the Backend's watches.
func (b *Backend) watchHub() *notify.Hub[*watchSub] {
	b.watchOnce.Do(func() {
		b.watches = notify.New(func() notify.Conn { return redisconn.PubSub(b.mux.client) }, watchPolicy{})
	})
	return b.watches
}

// Watch subscribes to changes of name's holders — every grant, re-entry,
// release, give-back, downgrade and new value, of every kind — and
// returns once the subscription is confirmed by the server and the
// watcher registered, so that the scripts publish every later change. An
// expiry publishes nothing: the Client reads again when the first holder's
// lease ends. Wait fails when the pub/sub connection was lost (notices may
// have gone unheard) or the registration cannot be refreshed; the Client
// then subscribes again and reads the holders.
func (b *Backend) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	k := b.keys.get(name)
	w := &watchSub{b: b, ch: k.lock() + ":watch", key: k.lock() + ":watchers", lock: k.lock(), id: b.peers.newID(), sig: make(chan struct{}, 1)}
	hub := b.watchHub()
	if hub == nil || !hub.Attach(w, w.ch, "") {
		return nil, fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
	}
	// In place once the server confirmed the SUBSCRIBE and no loss came
	// after the confirmation that losses counts from.
	for {
		select {
		case <-hub.Ready(w.ch):
		case <-ctx.Done():
			hub.Detach(w, w.ch)
			return nil, ctx.Err()
		case <-hub.Closing():
			hub.Detach(w, w.ch)
			return nil, fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
		}
		if !hub.Confirmed(w.ch) {
			continue
		}
		w.gen = w.losses.Load()
		if hub.Confirmed(w.ch) {
			break
		}
	}
	if err := w.register(ctx); err != nil {
		hub.Detach(w, w.ch)
		return nil, err
	}
	return w, nil
}

// watchSub is a [dlock.Subscription] of one name.
type watchSub struct {
	b       *Backend
	ch, key string // the watch channel and the watchers key
	lock    string // the lock's hash
	id      string
	sig     chan struct{} // a notice; capacity 1
	losses  atomic.Uint64 // losses of the connection heard (Retry)
	gen     uint64        // losses when the subscription was in place
	renewed time.Time     // when the registration was last written
	closed  atomic.Bool
}

func (w *watchSub) signal() {
	select {
	case w.sig <- struct{}{}:
	default:
	}
}

// register writes the watcher's registration, valid for watchTTL.
func (w *watchSub) register(ctx context.Context) error {
	now := time.Now()
	if _, _, err := w.b.run(ctx, watchScript, []any{w.key, w.lock}, w.id, millis(watchTTL)); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if strings.Contains(err.Error(), "WRONGTYPE") {
			return fmt.Errorf("%w: key %q holds another type than the sorted set dlock keeps there; nothing was changed", ErrForeignData, w.key)
		}
		return classify(err)
	}
	w.renewed = now
	return nil
}

// Wait blocks until a notice of a change, a lost connection (then it
// returns an error) or the end of ctx. While it waits it refreshes the
// watcher's registration.
func (w *watchSub) Wait(ctx context.Context) error {
	hub := w.b.watches
	for {
		if w.losses.Load() != w.gen {
			return fmt.Errorf("%w: the pub/sub connection was lost; changes may have gone unheard", dlock.ErrBackendUnavailable)
		}
		if d := time.Until(w.renewed.Add(watchRefresh)); d <= 0 {
			if err := w.register(ctx); err != nil {
				return err
			}
		}
		t := time.NewTimer(time.Until(w.renewed.Add(watchRefresh)))
		select {
		case <-w.sig:
			t.Stop()
			if w.losses.Load() != w.gen {
				continue // reported above
			}
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-hub.Closing():
			t.Stop()
			return fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
		}
	}
}

// Close ends the subscription and removes the registration (in the
// background, bounded by cleanupTimeout).
func (w *watchSub) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.b.watches.Detach(w, w.ch)
	if w.b.closed.Load() {
		return nil // the registration runs out by itself
	}
	w.b.bg.Add(1)
	go func() {
		defer w.b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		w.b.run(ctx, watchScript, []any{w.key, w.lock}, w.id, 0)
	}()
	return nil
}

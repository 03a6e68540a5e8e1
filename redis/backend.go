package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/notify"
	goredis "github.com/redis/go-redis/v9"
)

// Backend is a [dlock.Backend] on a Redis server, a Sentinel-managed
// master or a Redis Cluster. Create it with [New] on a go-redis client,
// with [Open] on an address, or by URL with dlock.Open. It is safe for
// concurrent use.
type Backend struct {
	rdb     goredis.UniversalClient
	cluster *goredis.ClusterClient // set for a Cluster
	owned   bool                   // Close closes rdb
	desc    string
	cfg     config
	mux     *mux
	batch   *batcher
	keys    keyCache
	acquire *script                // acquireClockScript, or acquireScript with ClockTokens(false)
	wtArg   any                    // the waiter timeout in ms, as a script argument
	ttlArg  atomic.Pointer[ttlArg] // the last TTL acquired with, as a script argument

	watchOnce sync.Once
	watches   *notify.Hub[*watchSub] // the watches' pub/sub connection, made by the first Watch

	peers     *peers         // this process's Backends on the same server
	bg        sync.WaitGroup // clean-up running on its own
	checkMu   sync.Mutex
	checked   atomic.Pointer[checkResult]
	closeOnce sync.Once
	closed    atomic.Bool
}

type checkResult struct{ err error }

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
)

// New returns a backend on rdb: a *redis.Client (also one made by
// redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient of the
// go-redis v9 package. A *redis.Ring is refused with ErrInvalidOption: it
// shards pub/sub connections by channel, and the backend's waiters share
// one connection for all locks. The backend does not take rdb
// over: Close leaves it open, and the caller closes it after the backend.
// The backend opens one pub/sub connection of its own through rdb, the
// first time a Lock has to wait, shared by all its waiters.
//
// New does no I/O; the first operation checks that the server is Redis
// [MinServerVersion] or later.
//
// The options that make a client ([Credentials], [DB], [Sentinel],
// [SentinelCredentials], [Cluster], [TLS], [ConnectTimeout]) are Open's
// only; New rejects them.
func New(rdb goredis.UniversalClient, opts ...Option) (*Backend, error) {
	if rdb == nil {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "redis.New: nil client")
	}
	cfg := newConfig(opts)
	if len(cfg.dial.set) > 0 {
		cfg.errs = append(cfg.errs, strings.Join(cfg.dial.set, ", ")+" apply to Open only, which makes the client")
	}
	return newBackend(rdb, cfg)
}

func newBackend(rdb goredis.UniversalClient, cfg config) (*Backend, error) {
	b := &Backend{rdb: rdb, cfg: cfg, acquire: acquireClockScript}
	switch c := rdb.(type) {
	case *goredis.Client:
		if addr := c.Options().Addr; addr == "FailoverClient" {
			b.desc = "redis sentinel"
		} else {
			b.desc = "redis " + addr
			if db := c.Options().DB; db != 0 {
				b.desc += "/" + strconv.Itoa(db)
			}
		}
	case *goredis.ClusterClient:
		b.cluster = c
		b.desc = "redis cluster " + strings.Join(c.Options().Addrs, ",")
	case *goredis.Ring:
		cfg.errs = append(cfg.errs, "a *redis.Ring is not supported (its pub/sub is per shard, and the backend's waiters share one connection); use a *redis.Client per server or a *redis.ClusterClient")
		b.desc = "redis ring"
	default:
		b.desc = "redis"
	}
	if cfg.desc != "" {
		b.desc = cfg.desc
	}
	if len(cfg.errs) > 0 {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "redis: %s", strings.Join(cfg.errs, "; "))
	}
	b.mux = newMux(b)
	b.batch = newBatcher(b)
	b.keys.prefix = cfg.prefix
	if !cfg.clockTokens {
		b.acquire = acquireScript // the opt-out: see ClockTokens
	}
	b.wtArg = millis(cfg.waiterTimeout)
	b.peers = joinPeers(b.desc)
	return b, nil
}

// String describes the backend, e.g. "redis 127.0.0.1:6379".
func (b *Backend) String() string { return b.desc }

// Client returns the go-redis client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.rdb }

// Close stops the backend's pub/sub connection and goroutines. It closes
// the go-redis client only if the backend made it (dlock.Open).
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.bg.Wait()
		b.batch.close()
		b.mux.close()
		b.watchOnce.Do(func() {}) // no hub after this
		if b.watches != nil {
			b.watches.Close()
		}
		leavePeers(b.peers)
		if b.owned {
			err = b.rdb.Close()
		}
	})
	return err
}

// ready checks, once, that the backend is open and the server recent
// enough.
func (b *Backend) ready(ctx context.Context) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
	}
	if r := b.checked.Load(); r != nil {
		return r.err
	}
	b.checkMu.Lock()
	defer b.checkMu.Unlock()
	if r := b.checked.Load(); r != nil {
		return r.err
	}
	cmd := goredis.NewStringCmd(ctx, "info", "server")
	err := b.batch.do(ctx, cmd)
	info := cmd.Val()
	if err != nil {
		if isRedisReply(err) {
			cerr := classify(err)
			if errors.Is(cerr, dlock.ErrBackendUnavailable) {
				return cerr // authentication, loading: not a verdict on the server
			}
			// INFO is not allowed here (ACL, renamed command): let the
			// scripts show what the server can do.
			b.checked.Store(&checkResult{})
			return nil
		}
		return classify(err)
	}
	r := &checkResult{}
	if v := infoField(info, "redis_version"); v != "" && !versionOK(v) {
		r.err = fmt.Errorf("%w: the server runs Redis %s; dlock's scripts need %s or later", ErrServerTooOld, v, MinServerVersion)
	}
	b.checked.Store(r)
	return r.err
}

// Modes of an attempt, as the acquire script takes them.
const (
	modeTry  = "t"
	modeWait = "w"
	modeFair = "f"
)

// Acquire makes one attempt; see [dlock.Backend]. An uncontended attempt
// is one script call. When the lock is held and req.Wait is set, the
// returned waiter is subscribed to the lock's channel on the backend's
// shared pub/sub connection (for a fair request it is also in the lock's
// queue).
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if req.Kind != dlock.KindMutex {
		return b.acquireWeighted(ctx, req)
	}
	if err := b.ready(ctx); err != nil {
		return dlock.Grant{}, nil, err
	}
	w := &waiter{b: b, k: b.keys.get(req.Name), req: req, rid: b.peers.newID(), mode: modeTry, hint: -1}
	if req.Wait {
		w.ch = w.k.channel()
		w.mode = modeWait
		if req.Fair {
			w.mode = modeFair
			// Registered before its first attempt, which may queue it:
			// a release in this process wakes it directly from then on.
			w.wake = make(chan struct{}, 1)
			b.peers.fair.add(w)
		}
		// If this process already listens on the lock's channel, the
		// waiter joins before its first attempt, so that no release after
		// the attempt can go unnoticed.
		w.armed = b.mux.tryAttach(w)
	}
	g, err := b.attempt(ctx, w)
	if err == nil {
		if req.Wait {
			b.mux.detach(w, true)
			b.peers.fair.remove(w)
		}
		return g, nil, nil
	}
	if !req.Wait || !errors.Is(err, dlock.ErrNotAcquired) {
		if req.Wait {
			b.mux.detach(w, false)
			b.peers.fair.remove(w)
		}
		if w.uncertain {
			// The attempt may have been granted without our learning it:
			// give it back, without holding up the caller.
			b.bg.Add(1)
			go func() {
				defer b.bg.Done()
				b.withdraw(ctx, w)
			}()
		}
		return dlock.Grant{}, nil, err
	}
	if !w.attached {
		b.mux.attach(w)
	}
	return dlock.Grant{}, w, err
}

// attempt runs the acquire script for w.
func (b *Backend) attempt(ctx context.Context, w *waiter) (dlock.Grant, error) {
	k := w.k
	var mode any
	switch w.mode { // constants, so that no argument is allocated for them
	case modeWait:
		mode = modeWait
	case modeFair:
		mode = modeFair
	default:
		mode = modeTry
	}
	// The first attempt's arguments go in the waiter, which no later
	// attempt reuses: a call whose ctx ended may still be sent.
	var a []any
	if w.sent {
		a = make([]any, 0, len(w.args))
	} else {
		a, w.sent = w.args[:0], true
	}
	a = appendEval(a, b.acquire, k.all[:])
	a = append(a, &w.req.Owner, b.ttlMillis(w.req.TTL), &w.rid, mode, b.wtArg)
	v, acked, err := b.runEval(ctx, b.acquire, a)
	if err != nil {
		w.uncertain = uncertain(err)
		return dlock.Grant{}, b.fail(k, err)
	}
	w.uncertain = false
	r, _ := v.([]any)
	var granted any // the token of a grant
	count := int64(1)
	switch {
	case len(r) == 0:
		granted = v // an integer: a new grant (the script's common case)
	case len(r) < 3:
		return dlock.Grant{}, fmt.Errorf("redis: unexpected reply %v from the acquire script", v)
	case toInt(r[0]) == 1:
		granted, count = r[1], toInt(r[2])
	}
	if granted != nil {
		tok, err := parseToken(granted)
		if err != nil {
			return dlock.Grant{}, fmt.Errorf("redis: bad token %v in %s: %w", granted, k.lock(), err)
		}
		if b.cfg.replicas > 0 && acked < b.cfg.replicas {
			b.giveBack(ctx, k, w.req.Owner, tok)
			return dlock.Grant{}, fmt.Errorf("%w: the grant reached %d of %d replicas within %v and was given back",
				dlock.ErrBackendUnavailable, acked, b.cfg.replicas, b.cfg.replicaTimeout)
		}
		return dlock.Grant{Token: tok, Count: int(count), Handle: k}, nil
	}
	if len(r) < 5 {
		return dlock.Grant{}, fmt.Errorf("redis: unexpected reply %v from the acquire script", v)
	}
	owner := toStr(r[1])
	hint := toInt(r[3])
	if hint >= 0 {
		w.hint = time.Duration(hint+1) * time.Millisecond
	} else {
		w.hint = -1
	}
	if owner == "" {
		return dlock.Grant{}, fmt.Errorf("%w: free, but %d fair waiter(s) are queued first", dlock.ErrNotAcquired, toInt(r[4]))
	}
	tok, _ := strconv.ParseUint(toStr(r[2]), 10, 64)
	var ttl time.Duration
	if hint > 0 {
		ttl = time.Duration(hint) * time.Millisecond
	}
	return dlock.Grant{}, &dlock.HeldError{Holder: dlock.Holder{Owner: owner, Token: tok, TTL: ttl}}
}

// ttlArg is a TTL and its whole milliseconds as a script argument.
type ttlArg struct {
	ttl time.Duration
	ms  any
}

// ttlMillis returns ttl in whole milliseconds as a script argument; a
// Backend's locks mostly share one TTL, whose argument is kept.
func (b *Backend) ttlMillis(ttl time.Duration) any {
	if a := b.ttlArg.Load(); a != nil && a.ttl == ttl {
		return a.ms
	}
	a := &ttlArg{ttl: ttl, ms: millis(ttl)}
	b.ttlArg.Store(a)
	return a.ms
}

// giveBack releases a grant the caller will not use.
func (b *Backend) giveBack(ctx context.Context, k *keys, owner string, tok uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	b.release(ctx, k, owner, tok, false)
}

// release runs the release script. When the lock frees with a fair waiter
// of this process (of a Backend on the same server) at the head of its queue, the script does not publish and
// release wakes the waiter; when the outcome is unknown, it wakes this
// process's fair waiters of the lock, which then try again.
//
// With WaitReplicas, replicas says whether to send WAIT along (as a
// release by the lease holder does; the acknowledgement is not awaited).
func (b *Backend) release(ctx context.Context, k *keys, owner string, tok uint64, replicas bool) (any, error) {
	// One allocation for the call's arguments (see appendEval).
	ra := &releaseArgs{owner: owner, tok: tok}
	args := appendEval(ra.a[:0], releaseScript, k.all[:])
	args = append(args, &ra.owner, &ra.tok, b.peers.tagArg)
	// The first fair waiter of this process on the lock is offered the
	// lock, in case it heads the queue. Not with WaitReplicas: a grant must
	// be acknowledged by the replicas before it counts, and the waiter
	// could not tell.
	var cand *waiter
	if b.cfg.replicas == 0 {
		if cand = b.peers.fair.first(k.lock()); cand != nil {
			args = append(args, cand.rid, cand.req.Owner, b.ttlMillis(cand.req.TTL))
		}
	}
	sent := time.Now()
	var v any
	var err error
	if replicas {
		v, _, err = b.runEval(ctx, releaseScript, args)
	} else {
		v, err = b.runScript(ctx, releaseScript, args)
	}
	if err != nil {
		if uncertain(err) {
			b.peers.fair.wakeLock(k.lock())
		}
		return nil, err
	}
	// A bare 1 says the lock freed with no queue: nobody to wake.
	if r, _ := v.([]any); len(r) >= 4 && toInt(r[0]) == 1 {
		head := toStr(r[2])
		if t := toStr(r[3]); t != "" && cand != nil && head == cand.rid {
			if n, perr := strconv.ParseUint(t, 10, 64); perr == nil {
				b.peers.fair.handOff(cand, &handoff{token: n, sent: sent})
				return v, nil
			}
		}
		if strings.HasPrefix(head, b.peers.tag) {
			b.peers.fair.wake(head)
		}
	}
	return v, nil
}

// releaseArgs are the arguments of a release: EVALSHA, its keys, and
// the owner and token, which go in as pointers to the fields.
type releaseArgs struct {
	a     [3 + 4 + 6]any
	owner string
	tok   uint64
}

// withdraw runs the cancel script for w, for an attempt whose outcome is
// unknown, with a context of its own.
func (b *Backend) withdraw(ctx context.Context, w *waiter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	w.cancelOnServer(ctx)
}

// cleanupTimeout bounds the clean-up a failed call does on its own.
const cleanupTimeout = 2 * time.Second

// Renew extends the hold h to ttl from now.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if h.Kind != dlock.KindMutex {
		return b.renewWeighted(ctx, h, ttl)
	}
	k := b.keysOf(h)
	v, acked, err := b.run(ctx, renewScript, k.all[:1], h.Owner, strconv.FormatUint(h.Token, 10), millis(ttl))
	if err != nil {
		return b.fail(k, err)
	}
	r, _ := v.([]any)
	if len(r) >= 1 && toInt(r[0]) == 1 {
		if b.cfg.replicas > 0 && acked < b.cfg.replicas {
			return fmt.Errorf("%w: the renewal reached %d of %d replicas within %v",
				dlock.ErrBackendUnavailable, acked, b.cfg.replicas, b.cfg.replicaTimeout)
		}
		return nil
	}
	if len(r) < 3 {
		return fmt.Errorf("redis: unexpected reply %v from the renew script", v)
	}
	return lost(h.Token, toStr(r[1]), toStr(r[2]))
}

// Release gives up one hold of h; when the lock frees it publishes on the
// lock's channel so that a waiter wakes.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if h.Kind != dlock.KindMutex {
		return b.releaseWeighted(ctx, h)
	}
	k := b.keysOf(h)
	v, err := b.release(ctx, k, h.Owner, h.Token, true)
	if err != nil {
		return b.fail(k, err)
	}
	r, _ := v.([]any)
	if n, ok := v.(int64); ok && n == 1 || len(r) >= 2 && toInt(r[0]) == 1 {
		return nil
	}
	if len(r) < 3 {
		return fmt.Errorf("redis: unexpected reply %v from the release script", v)
	}
	return lost(h.Token, toStr(r[1]), toStr(r[2]))
}

func lost(token uint64, owner, tok string) error {
	if owner == "" {
		return fmt.Errorf("%w: token %d expired or was released", dlock.ErrLeaseLost, token)
	}
	return fmt.Errorf("%w: held by %q with token %s", dlock.ErrLeaseLost, owner, tok)
}

// keysOf returns the keys of a hold, from its handle when it has one.
func (b *Backend) keysOf(h dlock.Hold) *keys {
	if k, ok := h.Handle.(*keys); ok && k != nil {
		return k
	}
	return b.keys.get(h.Name)
}

// run runs s on keys and args. With WaitReplicas it sends WAIT in the same
// pipeline (one connection, one round trip) and returns the number of
// replicas that acknowledged.
func (b *Backend) run(ctx context.Context, s *script, keys []any, args ...any) (any, int, error) {
	return b.runEval(ctx, s, evalArgs(true, s, keys, args))
}

// runEval is run with the EVALSHA arguments a (see appendEval), which it
// may rewrite.
func (b *Backend) runEval(ctx context.Context, s *script, a []any) (any, int, error) {
	if b.cfg.replicas == 0 {
		v, err := b.runScript(ctx, s, a)
		return v, 0, err
	}
	var p goredis.Pipeliner
	if b.cluster != nil {
		node, err := b.cluster.MasterForKey(ctx, a[3].(string))
		if err != nil {
			return nil, 0, err
		}
		p = node.Pipeline()
	} else {
		p = b.rdb.Pipeline()
	}
	for _, sha := range []bool{true, false} {
		if !sha {
			a[0], a[1] = "eval", s.srcArg
		}
		ev := goredis.NewCmd(ctx, a...)
		p.Process(ctx, ev)
		wt := p.Do(ctx, "wait", b.cfg.replicas, millis(b.cfg.replicaTimeout))
		p.Exec(ctx)
		if sha && isNoScript(ev.Err()) {
			continue
		}
		v, err := ev.Result()
		if err != nil {
			return nil, 0, err
		}
		n, _ := wt.Int64()
		return v, int(n), nil
	}
	panic("unreachable")
}

// fail turns the error of a script on the keys k into the backend's error.
func (b *Backend) fail(k *keys, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "DLOCKFOREIGN"):
		if err := b.mutexConflict(k, msg); err != nil {
			return err
		}
		_, why, _ := strings.Cut(msg, "DLOCKFOREIGN ")
		return fmt.Errorf("%w: key %q holds data that dlock did not write (%s); nothing was changed", ErrForeignData, k.lock(), why)
	case strings.Contains(msg, "WRONGTYPE"):
		return b.foreign(k, err)
	}
	return classify(err)
}

// foreign finds which of the keys k holds another type than dlock keeps
// there, after a script failed with WRONGTYPE.
func (b *Backend) foreign(k *keys, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	want := []struct{ key, typ string }{{k.lock(), "hash"}, {k.queue(), "list"}, {k.timeouts(), "zset"}, {k.fence(), "string"}}
	p := b.rdb.Pipeline()
	cmds := make([]*goredis.StatusCmd, len(want))
	for i, w := range want {
		cmds[i] = p.Type(ctx, w.key)
	}
	p.Exec(ctx)
	for i, w := range want {
		if t := cmds[i].Val(); t != "" && t != "none" && t != w.typ {
			return fmt.Errorf("%w: key %q holds a %s where dlock keeps a %s; nothing was changed", ErrForeignData, w.key, t, w.typ)
		}
	}
	return fmt.Errorf("%w: a key of %q holds another type; nothing was changed: %w", ErrForeignData, k.lock(), cause)
}

// millis converts d to whole milliseconds, rounding up so that the store
// never keeps a lease shorter than the client assumes, without overflow.
func millis(d time.Duration) int64 {
	return dur.Ceil(d, time.Millisecond)
}

// parseToken reads a token from a script's reply: an integer or a string
// of digits.
func parseToken(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		if x <= 0 {
			return 0, fmt.Errorf("token %d is not positive", x)
		}
		return uint64(x), nil
	case string:
		return strconv.ParseUint(x, 10, 64)
	}
	return 0, fmt.Errorf("token of type %T", v)
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

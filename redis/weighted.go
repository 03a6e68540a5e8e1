package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// The weighted kinds (semaphores, read-write locks): the Backend's side of
// the scripts in weighted_scripts.go. The mutex keeps its own scripts and
// paths; Acquire, Renew, Release and RenewBatch branch here on the kind.

var (
	_ dlock.Granter    = (*Backend)(nil)
	_ dlock.Downgrader = (*Backend)(nil)
	_ dlock.Proclaimer = (*Backend)(nil)
)

// CanGrant says yes to semaphores and read-write locks of a limit in [1,
// dlock.MaxLimit] and to elections (limit 1), on a single server,
// Sentinel and Cluster alike: a name's whole state is under its hash tag,
// and every operation is one script. An election is granted as a weighted
// name of limit 1 whose state also keeps the leader's value.
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	switch kind {
	case dlock.KindMutex:
		return nil
	case dlock.KindElection:
		if limit != 1 {
			return fmt.Errorf("%w: an election has limit 1, not %d", dlock.ErrInvalidOption, limit)
		}
		return nil
	case dlock.KindSemaphore, dlock.KindRWMutex:
		if limit < 1 || limit > dlock.MaxLimit {
			return fmt.Errorf("%w: limit %d of a %s is outside [1, %d]", dlock.ErrInvalidOption, limit, kind, dlock.MaxLimit)
		}
		return nil
	}
	return fmt.Errorf("%w: the redis backend does not grant a %s", errors.ErrUnsupported, kind)
}

// wkeys returns the KEYS of a weighted script: the lock's hash, queue,
// timeouts and fence key, its holders hash and its expiry zset.
func wkeys(k *keys) []any {
	l := k.lock()
	return []any{k.all[0], k.all[1], k.all[2], k.all[3], l + ":holders", l + ":expiry"}
}

// acquireWeighted is Acquire for a kind other than the mutex. A waiting
// request is always queued (the head-of-line rule of weighted grants), and
// its waiter is woken by a notice naming its request id.
func (b *Backend) acquireWeighted(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := b.ready(ctx); err != nil {
		return dlock.Grant{}, nil, err
	}
	w := &waiter{b: b, k: b.keys.get(req.Name), req: req, rid: b.peers.newID(), mode: modeTry, hint: -1}
	if req.Wait {
		w.ch = w.k.channel()
		w.mode = modeFair
		w.armed = b.mux.tryAttach(w)
	}
	g, err := b.wattempt(ctx, w)
	if err == nil {
		if req.Wait {
			b.mux.detach(w, true)
		}
		return g, nil, nil
	}
	if !req.Wait || !errors.Is(err, dlock.ErrNotAcquired) {
		if req.Wait {
			b.mux.detach(w, false)
		}
		if w.uncertain {
			b.bg.Add(1)
			go func() {
				defer b.bg.Done()
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				b.wcancel(ctx, w)
			}()
		}
		return dlock.Grant{}, nil, err
	}
	if !w.attached {
		b.mux.attach(w)
	}
	return dlock.Grant{}, wwaiter{w}, err
}

// wattempt runs the weighted acquire script for w.
func (b *Backend) wattempt(ctx context.Context, w *waiter) (dlock.Grant, error) {
	k, r := w.k, w.req
	mode := modeTry
	if w.mode == modeFair {
		mode = modeFair
	}
	v, acked, err := b.run(ctx, wacquireScript, wkeys(k), r.Owner, b.ttlMillis(r.TTL), w.rid, mode, b.wtArg, int(r.Kind), r.Limit, r.Weight, r.Value)
	if err != nil {
		w.uncertain = uncertain(err)
		return dlock.Grant{}, b.wfail(k, err)
	}
	w.uncertain = false
	a, _ := v.([]any)
	bad := func() (dlock.Grant, error) {
		return dlock.Grant{}, fmt.Errorf("redis: unexpected reply %v from the weighted acquire script", v)
	}
	if len(a) < 2 {
		return bad()
	}
	switch toInt(a[0]) {
	case 1:
		if len(a) < 3 {
			return bad()
		}
		tok, err := parseToken(a[1])
		if err != nil {
			return dlock.Grant{}, fmt.Errorf("redis: bad token %v in %s: %w", a[1], k.lock(), err)
		}
		if b.cfg.replicas > 0 && acked < b.cfg.replicas {
			b.wgiveBack(ctx, k, r.Owner, tok)
			return dlock.Grant{}, fmt.Errorf("%w: the grant reached %d of %d replicas within %v and was given back",
				dlock.ErrBackendUnavailable, acked, b.cfg.replicas, b.cfg.replicaTimeout)
		}
		return dlock.Grant{Token: tok, Count: int(toInt(a[2])), Handle: k}, nil
	case -1:
		if len(a) < 3 {
			return bad()
		}
		return dlock.Grant{}, &dlock.ConflictError{Kind: dlock.Kind(toInt(a[1])), Limit: int(toInt(a[2])), AskedKind: r.Kind, AskedLimit: r.Limit}
	case -2:
		return dlock.Grant{}, fmt.Errorf("holds %d, asks %d: %w", toInt(a[1]), r.Weight, dlock.ErrUpgrade)
	case 0:
	default:
		return bad()
	}
	if len(a) < 9 {
		return bad()
	}
	if hint := toInt(a[3]); hint >= 0 {
		w.hint = time.Duration(hint+1) * time.Millisecond
	} else {
		w.hint = -1
	}
	qlen, used, limit := int(toInt(a[4])), int(toInt(a[5])), int(toInt(a[6]))
	e := &dlock.HeldError{Holder: dlock.Holder{Owner: toStr(a[1]), TTL: time.Duration(toInt(a[8])) * time.Millisecond}}
	e.Holder.Token, _ = strconv.ParseUint(toStr(a[2]), 10, 64)
	if limit > 1 {
		e.Held, e.Limit = used, limit
		if toInt(a[7]) == 1 {
			e.Queued = qlen
		}
	} else if e.Holder.Owner == "" {
		return dlock.Grant{}, fmt.Errorf("%w: free, but %d waiter(s) are queued first", dlock.ErrNotAcquired, qlen)
	}
	return dlock.Grant{}, e
}

// wwaiter is a waiting weighted acquisition: a waiter of the lock's
// subscription, with the weighted scripts for its attempts and its
// withdrawal.
type wwaiter struct{ *waiter }

// Acquire makes the waiter's next attempt.
func (w wwaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.done {
		return dlock.Grant{}, fmt.Errorf("%w: waiter already ended", dlock.ErrInvalidOption)
	}
	if err := w.b.ready(ctx); err != nil {
		return dlock.Grant{}, err
	}
	w.armed = w.b.mux.armed(w.waiter)
	// A notice that came before this attempt is answered by it.
	select {
	case <-w.wake:
	default:
	}
	g, err := w.b.wattempt(ctx, w.waiter)
	if err == nil {
		w.done = true
		w.b.mux.detach(w.waiter, true)
	}
	return g, err
}

// Cancel withdraws the waiter: it leaves the queue, and a grant that an
// attempt whose reply was lost may have made is given back.
func (w wwaiter) Cancel(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.b.mux.detach(w.waiter, false)
	return w.b.wcancel(ctx, w.waiter)
}

// wcancel runs the weighted cancel script for w.
func (b *Backend) wcancel(ctx context.Context, w *waiter) error {
	_, _, err := b.run(ctx, wcancelScript, wkeys(w.k), w.req.Owner, w.rid, w.req.Weight)
	if err != nil {
		return b.wfail(w.k, err)
	}
	return nil
}

// wgiveBack releases a weighted grant the caller will not use.
func (b *Backend) wgiveBack(ctx context.Context, k *keys, owner string, tok uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	b.run(ctx, wreleaseScript, wkeys(k), owner, strconv.FormatUint(tok, 10))
}

// renewWeighted is Renew for a weighted hold.
func (b *Backend) renewWeighted(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	k := b.keysOf(h)
	v, acked, err := b.run(ctx, wrenewScript, wkeys(k), h.Owner, strconv.FormatUint(h.Token, 10), millis(ttl))
	if err != nil {
		return b.wfail(k, err)
	}
	return b.wrenewed(h, v, acked)
}

// wrenewed is the outcome of a weighted renewal of h that replied v,
// acknowledged by acked replicas.
func (b *Backend) wrenewed(h dlock.Hold, v any, acked int) error {
	n, ok := v.(int64)
	if !ok || n < 0 {
		n = -2 // not a reply of the script
	}
	return b.renewedErr(dlock.Renewal{Hold: h}, n, acked, v)
}

// releaseWeighted is Release for a weighted hold.
func (b *Backend) releaseWeighted(ctx context.Context, h dlock.Hold) error {
	k := b.keysOf(h)
	v, _, err := b.run(ctx, wreleaseScript, wkeys(k), h.Owner, strconv.FormatUint(h.Token, 10))
	if err != nil {
		return b.wfail(k, err)
	}
	n, ok := v.(int64)
	switch {
	case !ok:
		return fmt.Errorf("redis: unexpected reply %v from the weighted release script", v)
	case n < 0:
		return fmt.Errorf("%w: token %d expired or was released", dlock.ErrLeaseLost, h.Token)
	}
	return nil
}

// Downgrade lowers the weight of a weighted hold in place (a writer
// becoming a reader), keeping its token and count, and wakes the queue's
// head if it now fits.
func (b *Backend) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if h.Kind == dlock.KindMutex {
		return fmt.Errorf("%w: a mutex hold has no weight to lower", errors.ErrUnsupported)
	}
	if err := b.ready(ctx); err != nil {
		return err
	}
	if weight < 1 {
		return fmt.Errorf("%w: weight %d is below 1", dlock.ErrInvalidOption, weight)
	}
	k := b.keysOf(h)
	v, acked, err := b.run(ctx, wdowngradeScript, wkeys(k), h.Owner, strconv.FormatUint(h.Token, 10), weight)
	if err != nil {
		return b.wfail(k, err)
	}
	if a, ok := v.([]any); ok && len(a) >= 2 && toInt(a[0]) == -2 {
		return fmt.Errorf("holds %d, asks %d: %w", toInt(a[1]), weight, dlock.ErrUpgrade)
	}
	return b.wrenewed(h, v, acked)
}

// Proclaim replaces the value of an election's hold h and tells the name's
// watchers, in one script: only while h is still held (else an error
// matching dlock.ErrLeaseLost).
func (b *Backend) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	if h.Kind != dlock.KindElection {
		return fmt.Errorf("%w: a %s hold has no value to proclaim", errors.ErrUnsupported, h.Kind)
	}
	if err := b.ready(ctx); err != nil {
		return err
	}
	k := b.keysOf(h)
	v, acked, err := b.run(ctx, wproclaimScript, wkeys(k), h.Owner, strconv.FormatUint(h.Token, 10), value)
	if err != nil {
		return b.wfail(k, err)
	}
	if n, ok := v.(int64); ok && n == -1 {
		return fmt.Errorf("%w: the name is no longer an election", dlock.ErrLeaseLost)
	}
	return b.wrenewed(h, v, acked)
}

// hasWeighted reports whether rs renews a weighted hold.
func hasWeighted(rs []dlock.Renewal) bool {
	for _, r := range rs {
		if r.Hold.Kind != dlock.KindMutex {
			return true
		}
	}
	return false
}

// renewMixed is RenewBatch for renewals among which are weighted holds:
// the mutex holds go through RenewBatch, the weighted ones in one pipeline
// of the weighted renew script.
func (b *Backend) renewMixed(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	var mi, wi []int
	var ms []dlock.Renewal
	for i, r := range rs {
		if r.Hold.Kind == dlock.KindMutex {
			mi = append(mi, i)
			ms = append(ms, r)
		} else {
			wi = append(wi, i)
		}
	}
	if len(ms) > 0 {
		for j, err := range b.RenewBatch(ctx, ms) {
			errs[mi[j]] = err
		}
	}
	if b.cfg.replicas > 0 || len(wi) == 1 {
		for _, i := range wi {
			errs[i] = b.renewWeighted(ctx, rs[i].Hold, rs[i].TTL)
		}
		return errs
	}
	results := make([]any, len(wi))
	callErrs := make([]error, len(wi))
	b.pipelineScripts(ctx, wrenewScript, len(wi), func(j int) ([]any, []any) {
		r := rs[wi[j]]
		return wkeys(b.keysOf(r.Hold)), []any{r.Hold.Owner, strconv.FormatUint(r.Hold.Token, 10), millis(r.TTL)}
	}, results, callErrs)
	for j, i := range wi {
		if callErrs[j] != nil {
			errs[i] = b.wfail(b.keysOf(rs[i].Hold), callErrs[j])
			continue
		}
		errs[i] = b.wrenewed(rs[i].Hold, results[j], 0)
	}
	return errs
}

// wfail is fail for the weighted scripts, whose state has two more keys.
func (b *Backend) wfail(k *keys, err error) error {
	if !strings.Contains(err.Error(), "WRONGTYPE") {
		return b.fail(k, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	wk := wkeys(k)
	want := []string{"hash", "list", "zset", "string", "hash", "zset"}
	p := b.rdb.Pipeline()
	cmds := make([]*goredis.StatusCmd, len(wk))
	for i, key := range wk {
		cmds[i] = p.Type(ctx, key.(string))
	}
	p.Exec(ctx)
	for i, key := range wk {
		if t := cmds[i].Val(); t != "" && t != "none" && t != want[i] {
			return fmt.Errorf("%w: key %q holds a %s where dlock keeps a %s; nothing was changed", ErrForeignData, key, t, want[i])
		}
	}
	return fmt.Errorf("%w: a key of %q holds another type; nothing was changed: %w", ErrForeignData, k.lock(), err)
}

// mutexConflict returns the refusal of a mutex request whose script found
// the lock's hash without a token (msg): if the hash is a weighted name's
// state, a *dlock.ConflictError naming its kind and limit; else nil (it is
// foreign data).
func (b *Backend) mutexConflict(k *keys, msg string) error {
	if !strings.Contains(msg, "token f is missing") {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	vals, err := b.rdb.HMGet(ctx, k.lock(), "k", "l").Result()
	if err != nil || len(vals) < 2 {
		return nil
	}
	kind, err1 := strconv.Atoi(toStr(vals[0]))
	limit, err2 := strconv.Atoi(toStr(vals[1]))
	if err1 != nil || err2 != nil || kind <= int(dlock.KindMutex) || kind > int(dlock.KindElection) {
		return nil
	}
	return &dlock.ConflictError{Kind: dlock.Kind(kind), Limit: limit, AskedKind: dlock.KindMutex, AskedLimit: 1}
}

// inspectWeighted lists the holders of the weighted names whose state
// hashes are keys (names: their lock names), one LockInfo per unexpired
// holder, or one with Bad for a state dlock cannot read.
func (b *Backend) inspectWeighted(ctx context.Context, c *goredis.Client, keys, names []string) ([]dlock.LockInfo, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	p := c.Pipeline()
	now := p.Time(ctx)
	st := make([]*goredis.SliceCmd, len(keys))
	hs := make([]*goredis.MapStringStringCmd, len(keys))
	es := make([]*goredis.ZSliceCmd, len(keys))
	ql := make([]*goredis.IntCmd, len(keys))
	for i, key := range keys {
		st[i] = p.HMGet(ctx, key, "k", "l", "u", "v")
		hs[i] = p.HGetAll(ctx, key+":holders")
		es[i] = p.ZRangeWithScores(ctx, key+":expiry", 0, -1)
		ql[i] = p.LLen(ctx, key+":queue")
	}
	if _, err := p.Exec(ctx); err != nil && !isRedisReply(err) {
		return nil, err
	}
	if now.Err() != nil {
		return nil, now.Err()
	}
	nowMs := now.Val().UnixMilli()
	var out []dlock.LockInfo
	for i, key := range keys {
		in := dlock.LockInfo{Name: names[i], Waiters: -1, Queued: int(ql[i].Val())}
		vals, err := st[i].Result()
		holders, herr := hs[i].Result()
		exps, eerr := es[i].Result()
		if err != nil || herr != nil || eerr != nil {
			in.Bad = fmt.Sprintf("a key of %q holds another type than dlock keeps there", key)
			out = append(out, in)
			continue
		}
		kind, e1 := strconv.Atoi(toStr(vals[0]))
		limit, e2 := strconv.Atoi(toStr(vals[1]))
		used, e3 := strconv.Atoi(toStr(vals[2]))
		in.Kind, in.Limit = dlock.Kind(kind), limit
		switch {
		case e1 != nil || kind <= int(dlock.KindMutex) || kind > int(dlock.KindElection):
			in.Bad = "kind k is not a weighted kind"
		case e2 != nil || limit < 1 || limit > dlock.MaxLimit:
			in.Bad = fmt.Sprintf("limit l is not an integer in [1, %d]", dlock.MaxLimit)
		case e3 != nil || used < 0:
			in.Bad = "weight held u is not a non-negative integer"
		case used > limit:
			in.Bad = fmt.Sprintf("weight held u (%d) is above the limit l (%d)", used, limit)
		}
		if in.Bad != "" {
			out = append(out, in)
			continue
		}
		for _, z := range exps {
			owner := toStr(z.Member)
			left := int64(z.Score) - nowMs
			if left <= 0 {
				continue
			}
			h := in
			h.Owner, h.TTL = owner, time.Duration(left)*time.Millisecond
			if in.Kind == dlock.KindElection {
				h.Value = toStr(vals[3])
			}
			var rid string
			if n, _ := fmt.Sscanf(holders[owner], "%d %d %d %s", &h.Weight, &h.Count, &h.Token, &rid); n < 3 || h.Weight < 1 || h.Weight > limit || h.Count < 1 {
				h.Bad = fmt.Sprintf("the holder record of %q is not \"weight count token id\" within the limit", owner)
			}
			out = append(out, h)
		}
	}
	return out, nil
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

var _ dlock.BatchRenewer = (*Backend)(nil)

// errNotHeld is a master's answer that it does not hold a hold.
var errNotHeld = errors.New("does not hold it")

// Renew extends the hold on every master in parallel. It succeeds when a
// quorum extended it in time to leave validity. When the masters' answers
// rule a quorum out, the hold is lost (the error matches
// [dlock.ErrLeaseLost]), because fewer than a quorum cannot keep it from
// another client, and what is left of it is released in the background.
// When a quorum was missed only for masters that did not answer, the error
// is a [*QuorumError] and the hold is kept: the lease is valid until its
// deadline, and the Client renews it again meanwhile.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	start := time.Now()
	keys, args := b.renewArgs(nil, nil, h, ttl)
	ok, no, failed := b.fanOut(context.WithoutCancel(ctx), b.quorum, true, func(ctx context.Context, i int) (bool, error) {
		res, err := b.renewOn(ctx, i, keys, args)
		if err != nil {
			return false, err
		}
		if errors.Is(res[0], errNotHeld) {
			return false, nil
		}
		return res[0] == nil, res[0]
	})
	err := b.renewed(h, ttl, ok, no, failed, time.Since(start))
	if errors.Is(err, dlock.ErrLeaseLost) {
		b.releaseLost([]dlock.Hold{h})
	}
	return err
}

// RenewBatch renews many holds with one script call per master, sent to
// all masters in parallel; each hold is judged as Renew judges it, by the
// masters that renewed it. It waits for every master's answer (at most the
// node timeout).
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	if b.closed.Load() {
		for i := range errs {
			errs[i] = fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
		}
		return errs
	}
	start := time.Now()
	keys, args := make([]string, 0, 2*len(rs)), make([]any, 0, 4*len(rs))
	for _, r := range rs {
		keys, args = b.renewArgs(keys, args, r.Hold, r.TTL)
	}
	n := len(b.nodes)
	answers, callErrs := make([][]error, n), make([]error, n)
	b.fanOut(context.WithoutCancel(ctx), n, false, func(ctx context.Context, i int) (bool, error) {
		answers[i], callErrs[i] = b.renewOn(ctx, i, keys, args)
		return callErrs[i] == nil, callErrs[i]
	})
	el := time.Since(start)
	var lost []dlock.Hold
	for j, r := range rs {
		ok := 0
		var no []int
		var failed []nodeRes
		for i := range n {
			switch {
			case callErrs[i] != nil:
				failed = append(failed, nodeRes{i: i, err: callErrs[i]})
			case answers[i][j] == nil:
				ok++
			case errors.Is(answers[i][j], errNotHeld):
				no = append(no, i)
			default:
				failed = append(failed, nodeRes{i: i, err: answers[i][j]})
			}
		}
		errs[j] = b.renewed(r.Hold, r.TTL, ok, no, failed, el)
		if errors.Is(errs[j], dlock.ErrLeaseLost) {
			lost = append(lost, r.Hold)
		}
	}
	b.releaseLost(lost)
	return errs
}

// renewArgs appends the renew script's keys and arguments for hold h and
// ttl to keys and args, and notes ttl as the hold's longest if it is.
func (b *Backend) renewArgs(keys []string, args []any, h dlock.Hold, ttl time.Duration) ([]string, []any) {
	gid := ""
	if hd, _ := h.Handle.(*handle); hd != nil {
		gid = hd.gid
		if hd.a.maxTTL.Load() < int64(ttl) {
			hd.a.maxTTL.Store(int64(ttl))
		}
	}
	keys = append(keys, b.lockKey(h.Name), b.fenceKey(h.Name))
	return keys, append(args, h.Owner, strconv.FormatUint(h.Token, 10), dur.Ceil(ttl, time.Millisecond), gid)
}

// renewOn runs the renew script on master i and returns its answer for
// each hold: nil if renewed, errNotHeld, or the hold's error (foreign
// data); or the error of the call.
func (b *Backend) renewOn(ctx context.Context, i int, keys []string, args []any) ([]error, error) {
	v, err := b.run(ctx, i, renewScript, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(keys)/2 {
		return nil, fmt.Errorf("redlock: %d answers from the renew script on master %s for %d holds", len(v), b.addrs[i], len(keys)/2)
	}
	out := make([]error, len(v))
	for j, r := range v {
		switch r := r.(type) {
		case int64:
			if r != 1 {
				out[j] = errNotHeld
			}
		case error:
			out[j] = b.foreign(r, keys[2*j], i)
			if strings.HasPrefix(r.Error(), "WRONGTYPE") {
				out[j] = fmt.Errorf("%w: a key of %q on master %s holds another type than dlock keeps there; nothing was changed",
					dlock.ErrForeignData, keys[2*j], b.addrs[i])
			}
		default:
			out[j] = fmt.Errorf("redlock: unexpected answer %v from the renew script on master %s", r, b.addrs[i])
		}
	}
	return out, nil
}

// renewed judges a renewal of h that ok masters made, no masters refused
// and failed could not make (the others did not answer), in el. It is
// lost, and the caller releases it on every master, when the masters that
// answered rule a quorum out (they do not hold it, or hold foreign data
// there) or when no validity is left. Masters that did not answer in time
// rule nothing out: the lease stays valid until its deadline, which
// counts from the last renewal that a quorum made, and the error (a
// [*QuorumError], matching [dlock.ErrBackendUnavailable]) has the Client
// renew again while the lease lasts. A slow pass over thousands of holds
// on a loaded machine must not cost all of them at once.
func (b *Backend) renewed(h dlock.Hold, ttl time.Duration, ok int, no []int, failed []nodeRes, el time.Duration) error {
	if ok < b.quorum {
		e := b.quorumError("renew", ok, failed)
		for _, i := range no {
			e.Failed = append(e.Failed, NodeError{Addr: b.addrs[i], Err: errNotHeld})
		}
		unsure := len(b.nodes) - ok - len(no)
		for _, f := range failed {
			if errors.Is(f.err, dlock.ErrForeignData) {
				unsure--
			}
		}
		if ok+unsure >= b.quorum {
			return e
		}
		return fmt.Errorf("%w: %w", dlock.ErrLeaseLost, e)
	}
	if ttl-el-b.drift(ttl) <= 0 {
		return fmt.Errorf("%w: the renewal took %v of a %v TTL", dlock.ErrLeaseLost, el.Round(time.Millisecond), ttl)
	}
	return nil
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// deadline, and the Client renews it again meanwhile. Renew waits for the
// masters for at most a third of ttl (at least the node timeout), and
// returns once a quorum renewed.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	return b.RenewBatch(ctx, []dlock.Renewal{{Hold: h, TTL: ttl}})[0]
}

// RenewBatch renews many holds with one script call per master, sent to
// all masters in parallel; each hold is judged as Renew judges it, by the
// masters that renewed it. It returns once every hold was renewed by a
// quorum, or every master answered, or a third of the shortest TTL passed
// (at least the node timeout): a renewal needs no shorter bound, since the
// lease's validity counts from before it was sent, and a call for
// thousands of holds takes a master far longer than one acquisition.
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	if len(rs) == 0 {
		return errs
	}
	if b.closed.Load() {
		for i := range errs {
			errs[i] = fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
		}
		return errs
	}
	start := time.Now()
	keys, args := make([]string, 0, 2*len(rs)), make([]any, 0, 4*len(rs))
	minTTL := time.Duration(math.MaxInt64)
	for _, r := range rs {
		keys, args = b.renewArgs(keys, args, r.Hold, r.TTL)
		minTTL = min(minTTL, r.TTL)
	}
	bound := max(b.cfg.nodeTimeout, minTTL/3)
	answers, callErrs := b.renewRound(ctx, len(rs), keys, args, bound)
	el := time.Since(start)
	var lost []dlock.Hold
	for j, r := range rs {
		ok := 0
		var no []int
		var failed []nodeRes
		for i := range b.nodes {
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

// errNoAnswer is the error of a master whose answer to a renewal did not
// come before the renewal returned.
var errNoAnswer = errors.New("no answer in time")

// renewRound runs the renew script with keys and args, for holds holds, on
// every master at once, each call bounded by ctx and bound, and collects
// the answers until every hold has a quorum of renewals or every master
// answered. It returns each master's answers, or the error of its call
// (errNoAnswer for a call still under way, which goes on in the
// background until its bound).
func (b *Backend) renewRound(ctx context.Context, holds int, keys []string, args []any, bound time.Duration) ([][]error, []error) {
	type answer struct {
		i   int
		res []error
		err error
	}
	n := len(b.nodes)
	ch := make(chan answer, n)
	// A call still under way when the round returns goes on until its
	// bound, or until the Backend closes.
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.closing, cancel)
	rctx, done := b.boundCtx(cctx, bound, n, func() { stop(); cancel() })
	for i := range n {
		b.bg.Add(1)
		b.spawn(i, func() {
			defer b.bg.Done()
			res, err := b.renewOn(rctx, i, keys, args)
			done()
			ch <- answer{i, res, err}
		})
	}
	answers, callErrs := make([][]error, n), make([]error, n)
	for i := range callErrs {
		callErrs[i] = errNoAnswer
	}
	renewed := 0
	for range n {
		a := <-ch
		answers[a.i], callErrs[a.i] = a.res, a.err
		if a.err == nil {
			renewed++
		}
		if renewed >= b.quorum && allRenewed(answers, holds, b.quorum) {
			break
		}
	}
	return answers, callErrs
}

// allRenewed reports whether each of the holds has a quorum of masters
// whose answers say it was renewed.
func allRenewed(answers [][]error, holds, quorum int) bool {
	for j := range holds {
		ok := 0
		for _, a := range answers {
			if a != nil && a[j] == nil {
				ok++
			}
		}
		if ok < quorum {
			return false
		}
	}
	return true
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
	v, err := b.runNow(ctx, i, renewScript, keys, args).Slice()
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

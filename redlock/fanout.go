package redlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

// fanOut runs call on every master in parallel, each under the node
// timeout, and returns when need of them succeeded, when all answered, or
// (with giveUp) when need can no longer be reached. Calls still running
// finish in the background.
func (b *Backend) fanOut(ctx context.Context, need int, giveUp bool, call func(ctx context.Context, i int) (bool, error)) (ok int, no []int, failed []nodeRes) {
	type res struct {
		i   int
		ok  bool
		err error
	}
	n := len(b.nodes)
	ch := make(chan res, n)
	rctx, end := b.roundCtx(ctx, n)
	for i := range n {
		b.bg.Add(1)
		b.spawn(i, func() {
			defer b.bg.Done()
			done, err := call(rctx, i)
			end()
			ch <- res{i, done, err}
		})
	}
	for got := 0; got < n; got++ {
		if ok >= need || giveUp && ok+n-got < need {
			break
		}
		r := <-ch
		switch {
		case r.err != nil:
			failed = append(failed, nodeRes{i: r.i, err: r.err})
		case r.ok:
			ok++
		default:
			no = append(no, r.i)
		}
	}
	return ok, no, failed
}

// releaseLost releases lost holds in the background on every master that
// may still have them, so that a minority keeps nobody out until its TTL.
// (A later Release of a lease finds nothing and reports the loss.) Each
// master gets one goroutine, which sends the releases as pipelines: a
// renewal pass that loses thousands of holds must not start a goroutine
// per hold and master.
func (b *Backend) releaseLost(hs []dlock.Hold) {
	var holds []dlock.Hold
	var gbs []giveBack
	for _, h := range hs {
		if hd, _ := h.Handle.(*handle); hd != nil && !hd.a.releasing() {
			continue
		}
		holds, gbs = append(holds, h), append(gbs, b.holdRelease(h))
	}
	if len(gbs) == 0 {
		return
	}
	for i := range b.nodes {
		b.bg.Add(1)
		go func() {
			defer b.bg.Done()
			for from := 0; from < len(gbs); from += maxBatch {
				to := min(from+maxBatch, len(gbs))
				ctx, cancel := b.nodeCtx(context.Background())
				cmds := b.runAll(ctx, i, releaseScript, gbs[from:to])
				cancel()
				for j, cmd := range cmds {
					ok, err := releaseReply(cmd)
					b.releasedOn(i, holds[from+j], gbs[from+j], ok, err)
				}
			}
		}()
	}
}

// holdRelease is the release of hold h on each master.
func (b *Backend) holdRelease(h dlock.Hold) giveBack {
	gb := giveBack{name: h.Name, owner: h.Owner, token: strconv.FormatUint(h.Token, 10),
		floor: strconv.FormatUint(h.Token+1, 10), until: time.Now().Add(dur.Sum(b.maxTTL(h), b.cfg.nodeTimeout))}
	if hd, _ := h.Handle.(*handle); hd != nil {
		gb.gid, gb.qid = hd.gid, hd.a.qid
	}
	b.prepare(&gb)
	return gb
}

// releaseOn releases hold h on master i with gb (see holdRelease),
// retrying in the background when the master cannot be reached, and
// records the answer for the attempt's late grants.
func (b *Backend) releaseOn(ctx context.Context, i int, h dlock.Hold, gb giveBack) (bool, error) {
	ok, err := b.releaseNode(ctx, i, gb)
	b.releasedOn(i, h, gb, ok, err)
	return ok, err
}

// releasedOn records the answer of master i to the release gb of hold h:
// released (ok), or not held there, or the error of a release that did
// not reach the master, which is then retried in the background.
func (b *Backend) releasedOn(i int, h dlock.Hold, gb giveBack, ok bool, err error) {
	if err != nil {
		b.retry(i, gb)
	}
	if hd, _ := h.Handle.(*handle); hd != nil {
		// A release that did not reach the master is retried, and counts
		// as reaching it: a grant that comes later is refused there.
		hd.a.releasedOn(i, ok || err != nil)
	}
}

// maxTTL is how long a master may keep hold h without renewal: the TTL of
// its acquisition, or of a later renewal if that was longer.
func (b *Backend) maxTTL(h dlock.Hold) time.Duration {
	if hd, _ := h.Handle.(*handle); hd != nil {
		return max(hd.a.req.TTL, time.Duration(hd.a.maxTTL.Load()))
	}
	return time.Minute
}

// Release gives up one hold on every master in parallel. It returns as
// soon as a quorum released (the other masters are released in the
// background, and retried until they answer or the hold expires there);
// otherwise, when all answered, it succeeds if the masters that answered
// released and fewer than a quorum did not hold it, and reports
// [dlock.ErrLeaseLost] when a quorum no longer held it.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	if hd, _ := h.Handle.(*handle); hd != nil && !hd.a.releasing() {
		return fmt.Errorf("%w: released already", dlock.ErrLeaseLost)
	}
	gb := b.holdRelease(h)
	call := func(ctx context.Context, i int) (bool, error) { return b.releaseOn(ctx, i, h, gb) }
	if p := b.takeParked(h.Name); p != nil {
		// A fair waiter of this process waits: its attempt follows the
		// release on each master (see pass.go).
		call = func(ctx context.Context, i int) (bool, error) { return b.releasePassing(ctx, i, h, gb, p) }
	}
	ok, no, failed := b.fanOut(context.Background(), b.quorum, false, call)
	switch {
	case ok >= b.quorum:
		return nil
	case ok > 0 && len(no) < b.quorum:
		// Masters that could not be reached are retried in the background
		// until their copies expire; fewer than a quorum of them cannot
		// keep anyone out.
		return nil
	case len(no) >= b.quorum || len(failed) == 0:
		return fmt.Errorf("%w: %d of %d masters did not hold it", dlock.ErrLeaseLost, len(no), len(b.nodes))
	default:
		return b.quorumError("release", ok, failed)
	}
}

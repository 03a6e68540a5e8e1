package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func (b *Backend) fenceNode(ctx context.Context, i int, name, owner, gid, qid string, token uint64) error {
	ctx, cancel := b.nodeCtx(ctx)
	defer cancel()
	v, err := b.run(ctx, i, fenceScript, b.keys(name), owner, gid, token, qid).Int64()
	if err != nil {
		return err
	}
	if v != 1 {
		return errors.New("the grant expired before its token was written")
	}
	return nil
}

// giveBack is the release of one hold (or of what an attempt may have got)
// on one master.
type giveBack struct {
	name, owner string
	token       string // the hold's token; "" to match by gid only
	gid         string // the acquisition id stored with the grant
	qid         string // the waiter to take out of the queues, if any
	floor       string // the master's fence is raised to this when the lock is free there
	until       time.Time

	keys []string // of the release script, made by prepare
	args []any
	full []any // the release script's command (see evalArgs), made by prepare
}

// prepare makes gb's script keys and arguments, the same for every master.
func (b *Backend) prepare(gb *giveBack) {
	gb.keys = b.keys(gb.name)
	gb.args = []any{gb.owner, gb.token, gb.gid, b.channel(gb.name), gb.qid, gb.floor, b.cfg.nodeTimeout.Milliseconds()}
	gb.full = evalArgs(releaseScript, gb.keys, gb.args...)
}

// releaseNode gives up one hold on master i. It reports whether the master
// released.
func (b *Backend) releaseNode(ctx context.Context, i int, gb giveBack) (bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = b.nodeCtx(ctx)
		defer cancel()
	}
	if gb.keys == nil {
		b.prepare(&gb)
	}
	return releaseReply(b.runEval(ctx, i, releaseScript, gb.full))
}

// releaseReply reads the release script's reply: whether the master
// released, or the error of the call.
func releaseReply(cmd *goredis.Cmd) (bool, error) {
	v, err := cmd.Slice()
	if err != nil {
		return false, err
	}
	ok, _ := v[0].(int64)
	return ok == 1, nil
}

// giveBack releases gb on master i, and if the master cannot be reached
// queues it for retries (see retryQueue). It reports whether the master
// released.
func (b *Backend) giveBack(i int, gb giveBack) bool {
	ok, err := b.releaseNode(context.Background(), i, gb)
	if err != nil {
		b.retry(i, gb)
	}
	return ok
}

// retryQueue holds the give-backs that did not reach a master. A master
// that did not answer (paused, slow, its link cut) may still execute an
// acquisition sent to it earlier, after the release that was meant to
// undo it failed: nobody would release that grant, and it would keep the
// lock from everyone on that master for a whole TTL. So the release is
// retried, by one goroutine per master while there is anything to retry,
// until it reaches the master or until any grant it undoes has expired.
// (A release that arrives first raises the master's fence above the
// grant's token, so that the late acquisition is refused.)
type retryQueue struct {
	mu      sync.Mutex
	items   []giveBack
	running bool
}

// retryDelay bounds the pause between retries of give-backs.
const maxRetryDelay = 250 * time.Millisecond

func (b *Backend) retry(i int, gb giveBack) {
	q := &b.retries[i]
	q.mu.Lock()
	defer q.mu.Unlock()
	if b.closed.Load() {
		return
	}
	q.items = append(q.items, gb)
	if !q.running {
		q.running = true
		b.bg.Add(1)
		go b.retryLoop(i)
	}
}

func (b *Backend) retryLoop(i int) {
	defer b.bg.Done()
	q := &b.retries[i]
	delay := 10 * time.Millisecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.stop:
			q.mu.Lock()
			q.items, q.running = nil, false
			q.mu.Unlock()
			return
		}
		q.mu.Lock()
		now := time.Now()
		q.items = slices.DeleteFunc(q.items, func(gb giveBack) bool { return now.After(gb.until) })
		if len(q.items) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		items := slices.Clone(q.items)
		q.mu.Unlock()
		done := 0
		for _, gb := range items {
			if _, err := b.releaseNode(context.Background(), i, gb); err != nil {
				break
			}
			done++
		}
		q.mu.Lock()
		q.items = q.items[done:]
		q.mu.Unlock()
		if done == len(items) {
			delay = 10 * time.Millisecond
		} else {
			delay = min(2*delay, maxRetryDelay)
		}
		t.Reset(delay)
	}
}

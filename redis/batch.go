package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// batcher sends the commands of a Backend. A command goes out at once on a
// pooled connection while fewer than maxDirect are in flight that way;
// under more concurrency the commands that arrive meanwhile queue up and a
// flusher goroutine sends all that are queued as one pipeline. Each
// operation is still one command; concurrent callers share the writes,
// reads and wake-ups of one round trip instead of paying for one each
// (group commit).
//
// The queue is also how a call honours its context's deadline when the
// go-redis client does not (ContextTimeoutEnabled off, the default: then
// go-redis bounds a round trip by its ReadTimeout only). Such a call waits
// in the queue and leaves when its context ends; a command that was not
// sent yet is dropped.
type batcher struct {
	b *Backend
	// ctxAware is set when the client applies context deadlines to its
	// reads and writes itself.
	ctxAware bool

	mu      sync.Mutex
	direct  int // commands in flight outside the flusher
	queue   []goredis.Cmder
	dones   []chan struct{}
	running bool // the flusher goroutine runs
	closed  bool
	wake    chan struct{}
	done    chan struct{} // closed when the flusher ends
}

// maxDirect is how many commands go out on their own before the others are
// batched.
const maxDirect = 1

// errNotSent wraps the context error of a command that was given up before
// it was sent: its outcome is known (nothing happened).
type errNotSent struct{ err error }

func (e *errNotSent) Error() string { return e.err.Error() }
func (e *errNotSent) Unwrap() error { return e.err }

// isNotSent reports whether err is from a command that was never sent.
func isNotSent(err error) bool {
	var ns *errNotSent
	return errors.As(err, &ns)
}

func newBatcher(b *Backend) *batcher {
	bt := &batcher{b: b, wake: make(chan struct{}, 1)}
	switch c := b.rdb.(type) {
	case *goredis.Client:
		bt.ctxAware = c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		bt.ctxAware = c.Options().ContextTimeoutEnabled
	}
	return bt
}

// do sends cmd and waits for its reply or the end of ctx.
func (bt *batcher) do(ctx context.Context, cmd goredis.Cmder) error {
	bt.mu.Lock()
	if bt.closed {
		bt.mu.Unlock()
		return fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
	}
	if bt.direct < maxDirect && len(bt.queue) == 0 && (bt.ctxAware || !hasDeadline(ctx)) {
		bt.direct++
		bt.mu.Unlock()
		err := bt.b.rdb.Process(ctx, cmd)
		bt.mu.Lock()
		bt.direct--
		bt.mu.Unlock()
		return err
	}
	if err := ctx.Err(); err != nil {
		bt.mu.Unlock()
		return &errNotSent{err}
	}
	done := make(chan struct{})
	bt.queue = append(bt.queue, cmd)
	bt.dones = append(bt.dones, done)
	if !bt.running {
		bt.running = true
		bt.done = make(chan struct{})
		go bt.flush()
	}
	bt.mu.Unlock()
	select {
	case bt.wake <- struct{}{}:
	default:
	}
	select {
	case <-done:
		return cmd.Err()
	case <-ctx.Done():
		bt.mu.Lock()
		defer bt.mu.Unlock()
		if i := slices.Index(bt.queue, cmd); i >= 0 {
			bt.queue = slices.Delete(bt.queue, i, i+1)
			bt.dones = slices.Delete(bt.dones, i, i+1)
			return &errNotSent{ctx.Err()}
		}
		return ctx.Err()
	}
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// flush sends the queued commands until the batcher is closed.
func (bt *batcher) flush() {
	defer close(bt.done)
	for {
		bt.mu.Lock()
		batch, dones := bt.queue, bt.dones
		bt.queue, bt.dones = nil, nil
		closed := bt.closed
		bt.mu.Unlock()
		if len(batch) > 0 {
			if len(batch) == 1 {
				bt.b.rdb.Process(context.Background(), batch[0])
			} else {
				p := bt.b.rdb.Pipeline()
				for _, cmd := range batch {
					p.Process(context.Background(), cmd)
				}
				p.Exec(context.Background())
			}
			for _, d := range dones {
				close(d)
			}
			continue
		}
		if closed {
			return
		}
		<-bt.wake
	}
}

// close stops the flusher after it sent what is queued.
func (bt *batcher) close() {
	bt.mu.Lock()
	bt.closed = true
	running := bt.running
	bt.mu.Unlock()
	if !running {
		return
	}
	select {
	case bt.wake <- struct{}{}:
	default:
	}
	<-bt.done
}

// evalArgs returns the arguments of EVAL or EVALSHA (with the script's
// source or hash) for keys and args.
func evalArgs(sha bool, s *script, keys []any, args []any) []any {
	a := make([]any, 3, 3+len(keys)+len(args))
	if sha {
		a[0], a[1] = "evalsha", s.hashArg
	} else {
		a[0], a[1] = "eval", s.srcArg
	}
	a[2] = len(keys)
	a = append(a, keys...)
	return append(a, args...)
}

// appendEval appends to a the start of EVALSHA of s on keys; the script's
// arguments follow. A caller that builds its arguments in a buffer of its
// own (see attempt, release) allocates no slice for them, and one that
// passes strings and numbers as pointers into a struct it allocated
// anyway (go-redis writes *string and *uint64 as their values) boxes none.
func appendEval(a []any, s *script, keys []any) []any {
	a = append(a, "evalsha", s.hashArg, len(keys))
	return append(a, keys...)
}

// runScript runs s with the EVALSHA arguments a (see appendEval), and
// with EVAL if the server does not have it cached; it rewrites a for
// that.
func (b *Backend) runScript(ctx context.Context, s *script, a []any) (any, error) {
	cmd := goredis.NewCmd(ctx, a...)
	err := b.batch.do(ctx, cmd)
	if isNoScript(err) {
		a[0], a[1] = "eval", s.srcArg
		cmd = goredis.NewCmd(ctx, a...)
		err = b.batch.do(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

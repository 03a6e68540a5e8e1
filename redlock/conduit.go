package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// conduit carries the scripts for one master. Up to maxInflight calls go
// to the master at once, each straight from its caller; calls made while
// that many are in flight queue up, and the first caller to get its answer
// sends everything queued as one pipeline (from a goroutine of its own, so
// that it returns at once), and so on until the queue is empty. Under load
// — many locks at once — one write and one read carry many calls, on the
// client and on the master; an idle master costs no extra goroutine or
// hand-off.
type conduit struct {
	c        *goredis.Client
	mu       sync.Mutex
	inflight int
	queue    []*call

	tasks chan func()  // to an idle goroutine of the pool (see spawn)
	pool  atomic.Int32 // goroutines in the pool
}

// call is one script call to one master.
type call struct {
	s    *goredis.Script
	keys []string
	args []any
	full []any // the whole EVALSHA command (see evalArgs), or nil: made from keys and args
	cmd  *goredis.Cmd
	done chan struct{} // closed when cmd has its answer (queued calls only)
}

const (
	maxInflight = 4   // calls or pipelines in flight per master
	maxBatch    = 128 // calls per pipeline

	maxPool  = 8           // goroutines kept per master for its calls
	poolIdle = time.Second // how long one of them waits for the next call
)

func (b *Backend) startConduits() {
	b.conduits = make([]conduit, len(b.nodes))
	for i, c := range b.nodes {
		b.conduits[i].c = c
		b.conduits[i].tasks = make(chan func())
	}
}

// spawn runs fn, which calls master i, in a goroutine of its own: an idle
// one of the master's pool, or a new one that joins the pool if it is not
// full. A call needs a deep stack (go-redis, the network, deadlines); a
// goroutine made for each call grows its stack every time, which cost a
// seventh of the CPU time of lock and unlock, and a pooled one keeps it.
// Whoever calls spawn counts fn in b.bg; Close ends the pool after b.bg.
func (b *Backend) spawn(i int, fn func()) {
	cd := &b.conduits[i]
	select {
	case cd.tasks <- fn:
		return
	default:
	}
	b.pool.Add(1)
	go b.poolWorker(cd, fn)
}

// poolWorker runs fn, then the calls spawn hands it until it was idle for
// poolIdle or the Backend closes. It does not stay if the pool is full.
func (b *Backend) poolWorker(cd *conduit, fn func()) {
	defer b.pool.Done()
	fn()
	if cd.pool.Add(1) > maxPool {
		cd.pool.Add(-1)
		return
	}
	defer cd.pool.Add(-1)
	t := time.NewTimer(poolIdle)
	defer t.Stop()
	for {
		select {
		case fn := <-cd.tasks:
			fn()
			t.Reset(poolIdle)
		case <-t.C:
			return
		case <-b.quit:
			return
		}
	}
}

// run calls script s on master i and waits for the answer or for ctx. A
// call given up on may still be executed by the master, as a call that
// timed out may. A call that queued behind others waits for its answer
// past ctx's deadline: that deadline (the node timeout) bounds how long
// the master takes to answer, and the queued call gets a node timeout of
// its own when it is sent, so time spent in this client's queue (a burst
// of many acquisitions at once) does not count as the master's. Only a
// cancellation gives up a queued call. Safety does not depend on it: an
// acquisition counts the whole time since it started against the TTL.
func (b *Backend) run(ctx context.Context, i int, s *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	return b.runCall(ctx, i, &call{s: s, keys: keys, args: args})
}

// runEval is run with the command made by evalArgs, which the calls of a
// fan-out share: made once, not once per master.
func (b *Backend) runEval(ctx context.Context, i int, s *goredis.Script, full []any) *goredis.Cmd {
	return b.runCall(ctx, i, &call{s: s, full: full})
}

// evalArgs is the EVALSHA command of script s with keys and args, for
// runEval. Its boxed keys and arguments cost an allocation each, so a
// fan-out makes it once for all masters (the calls only read it).
func evalArgs(s *goredis.Script, keys []string, args ...any) []any {
	full := make([]any, 0, 3+len(keys)+len(args))
	full = append(full, "evalsha", s.Hash(), len(keys))
	for _, k := range keys {
		full = append(full, k)
	}
	return append(full, args...)
}

func (b *Backend) runCall(ctx context.Context, i int, c *call) *goredis.Cmd {
	cd := &b.conduits[i]
	cd.mu.Lock()
	if cd.inflight < maxInflight {
		cd.inflight++
		cd.mu.Unlock()
		b.send(ctx, cd.c, []*call{c})
		b.serve(cd)
		return c.cmd
	}
	c.done = make(chan struct{})
	cd.queue = append(cd.queue, c)
	cd.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.Canceled) {
			<-c.done
			return c.cmd
		}
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// runNow calls script s on master i at once, on a connection of its own
// (outside the master's places in flight), bounded by ctx alone. It is for
// a renewal of many holds: queued behind acquisitions, it would go in
// their pipeline under one node timeout, far too short for its work.
func (b *Backend) runNow(ctx context.Context, i int, s *goredis.Script, keys []string, args []any) *goredis.Cmd {
	c := &call{s: s, keys: keys, args: args}
	b.send(ctx, b.conduits[i].c, []*call{c})
	return c.cmd
}

// runAll runs script s on master i once for each of gbs (prepared, see
// prepare) as one pipeline bounded by ctx, and returns the calls' answers
// in order. It is for background work of many calls at once (the release
// of many lost holds), which would otherwise take a goroutine per call to
// queue them here; it does not take one of the master's places in flight.
func (b *Backend) runAll(ctx context.Context, i int, s *goredis.Script, gbs []giveBack) []*goredis.Cmd {
	batch := make([]*call, len(gbs))
	for j := range gbs {
		batch[j] = &call{s: s, full: gbs[j].full}
	}
	b.send(ctx, b.conduits[i].c, batch)
	cmds := make([]*goredis.Cmd, len(batch))
	for j, c := range batch {
		cmds[j] = c.cmd
	}
	return cmds
}

// serve gives up the caller's place among the calls in flight, or, if
// calls queued meanwhile, keeps it for a goroutine that sends them.
func (b *Backend) serve(cd *conduit) {
	batch := cd.take()
	if batch == nil {
		return
	}
	b.workers.Add(1)
	go func() {
		defer b.workers.Done()
		for batch != nil {
			ctx, cancel := b.nodeCtx(context.Background())
			b.send(ctx, cd.c, batch)
			cancel()
			for _, c := range batch {
				close(c.done)
			}
			batch = cd.take()
		}
	}()
}

// take returns the next batch of queued calls, or nil (and one call fewer
// in flight) when none are queued.
func (cd *conduit) take() []*call {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	if len(cd.queue) == 0 {
		cd.inflight--
		return nil
	}
	n := min(len(cd.queue), maxBatch)
	batch := cd.queue[:n:n]
	cd.queue = cd.queue[n:]
	if len(cd.queue) == 0 {
		cd.queue = nil
	}
	return batch
}

// send runs batch on master c, one call alone or several as a pipeline,
// bounded by ctx, which every caller bounds by the node timeout (a script
// the master does not know yet goes again as EVAL).
func (b *Backend) send(ctx context.Context, c *goredis.Client, batch []*call) {
	if len(batch) == 1 {
		cl := batch[0]
		cl.cmd = c.Do(ctx, cl.command()...)
		if err := cl.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			cl.cmd = c.Do(ctx, cl.evalCommand()...)
		}
		return
	}
	pipe := c.Pipeline()
	for _, cl := range batch {
		cl.cmd = pipe.Do(ctx, cl.command()...)
	}
	pipe.Exec(ctx)
	var again []*call
	for _, cl := range batch {
		if err := cl.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, cl)
		}
	}
	if len(again) == 0 {
		return
	}
	pipe = c.Pipeline()
	for _, cl := range again {
		cl.cmd = pipe.Do(ctx, cl.evalCommand()...)
	}
	pipe.Exec(ctx)
}

// command is cl's EVALSHA command.
func (cl *call) command() []any {
	if cl.full == nil {
		cl.full = evalArgs(cl.s, cl.keys, cl.args...)
	}
	return cl.full
}

// evalCommand is cl's command as EVAL with the script's source, for a
// master that does not have the script yet (a copy: the EVALSHA command
// may be shared).
func (cl *call) evalCommand() []any {
	full := slices.Clone(cl.command())
	full[0], full[1] = "eval", scriptSource[cl.s]
	return full
}

// scriptSource maps each script to its source, for EVAL when a master does
// not have it yet.
var scriptSource = map[*goredis.Script]string{}

func newScript(src string) *goredis.Script {
	s := goredis.NewScript(src)
	scriptSource[s] = src
	return s
}

package sqllock

import (
	"context"
	"database/sql"
)

// SweepEvery is how often the engine sweeps: one acquisition or release
// in SweepEvery (per Engine) deletes up to [SweepBatch] lease rows that
// are free or expired and have no waiter rows, and up to SweepBatch
// expired waiter rows; while a sweep finds a full batch, the next call
// sweeps again. The work per call is bounded, and a backlog (holders that
// died with many names held) drains at SweepBatch rows per call.
const SweepEvery = 64

// maybeSweep sweeps if it is this call's turn (see SweepEvery). A failed
// sweep is left for a later turn: the caller's operation succeeded.
func (e *Engine) maybeSweep(ctx context.Context) {
	if e.ops.Add(1)%SweepEvery != 0 && !e.backlog.Load() {
		return
	}
	n, err := e.sweep(ctx)
	e.backlog.Store(err == nil && n >= SweepBatch)
}

// sweep deletes up to SweepBatch expired waiter rows and up to SweepBatch
// reclaimable lease rows, and returns how many lease rows it deleted. A
// deleted row's token is kept by the fence trigger in the same statement.
func (e *Engine) sweep(ctx context.Context) (int64, error) {
	var n int64
	err := e.write(ctx, func(ctx context.Context) error {
		if _, err := e.pool.ExecContext(ctx, e.q.sweepWaiters); err != nil {
			return err
		}
		if err := e.sweepHolders(ctx); err != nil {
			return err
		}
		del := func(q querier) error {
			res, err := q.ExecContext(ctx, e.q.sweep)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		}
		if !e.d.FenceTx {
			return del(&e.pool)
		}
		return e.tx(ctx, func(c *sql.Conn) error {
			if _, err := c.ExecContext(ctx, e.q.lockFence); err != nil {
				return err
			}
			return del(c)
		})
	})
	return n, e.wrap(err)
}

// Reclaim deletes now the state of every free name: the lease rows of
// dlock's that are free or expired and have no waiter rows, and the
// expired waiter rows, a batch at a time. The engine does the same
// within its normal operations (see SweepEvery); Reclaim is for tests
// and for `dlock` commands that want it done at once. It returns the
// number of lease rows deleted.
func (e *Engine) Reclaim(ctx context.Context) (int, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := e.sweep(ctx)
		total += int(n)
		if err != nil || n < SweepBatch {
			return total, err
		}
	}
}

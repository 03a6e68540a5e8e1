package sqllock

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// lost returns the error of a renewal or release of h that changed
// nothing, saying what the database has instead.
func (e *Engine) lost(ctx context.Context, h dlock.Hold) error {
	var s lockState
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		s, err = e.state(ctx, &e.pool, h.Name)
		return err
	})
	switch {
	case err != nil:
		return errorf(dlock.ErrLeaseLost, "token %d (and reading the lock's state failed: %v)", h.Token, err)
	case !s.exists:
		return errorf(dlock.ErrLeaseLost, "token %d: the lock has no row (released and reclaimed)", h.Token)
	case s.fault != "":
		return errorf(dlock.ErrLeaseLost, "token %d: %w", h.Token, e.foreign(h.Name, s.fault))
	case s.heldByOther(h.Owner) || s.holds > 0 && s.remaining > 0 && s.token != h.Token:
		return errorf(dlock.ErrLeaseLost, "held by %q with token %d", s.owner, s.token)
	case s.token != h.Token:
		return errorf(dlock.ErrLeaseLost, "token %d was followed by token %d", h.Token, s.token)
	}
	return errorf(dlock.ErrLeaseLost, "token %d expired or released", h.Token)
}

// Renew extends the hold h to ttl from now by the database's clock, if h
// still holds the lock and has not expired: one UPDATE.
func (e *Engine) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	if h.Kind != dlock.KindMutex {
		return e.wrenew(ctx, h, ttl)
	}
	var n int64
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		res, err := e.pool.ExecContext(ctx, e.q.renew, ttlMillis(ttl), h.Name, h.Owner, int64(h.Token))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return e.wrap(err)
	}
	if n == 0 {
		return e.lost(ctx, h)
	}
	return nil
}

// Release gives up one hold of h: one UPDATE that decrements the reentry
// count and clears the owner at zero, if h still holds the lock with its
// token and has not expired. A row freed with no waiter rows is deleted
// in the same statement by a trigger (or, under Dialect.DeleteFreed, by
// a DELETE tried first); its token is kept by its fence bucket. The
// waiters of this process are woken at once.
func (e *Engine) Release(ctx context.Context, h dlock.Hold) error {
	if h.Kind != dlock.KindMutex {
		if err := e.checkOpen(); err != nil {
			return err
		}
		return e.wrelease(ctx, h)
	}
	return e.release(ctx, h, e.d.DeleteFreed)
}

// release is Release; tryDelete says to try the DELETE of a last hold
// first (see Dialect.DeleteFreed).
func (e *Engine) release(ctx context.Context, h dlock.Hold, tryDelete bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	var (
		done  bool
		holds int64
	)
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		args := []any{h.Name, h.Owner, int64(h.Token)}
		if tryDelete {
			// The last hold without waiters: the row goes at once.
			res, err := e.pool.ExecContext(ctx, e.q.releaseDelete, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				done = n > 0
				return err
			}
		}
		if e.d.Returning {
			var err error
			done, err = queryOne(ctx, &e.pool, e.q.release, args, &holds)
			return err
		}
		res, err := e.pool.ExecContext(ctx, e.q.release, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		done = n > 0
		return err
	})
	if err != nil {
		return e.wrap(err)
	}
	if !done {
		return e.lost(ctx, h)
	}
	e.maybeSweep(ctx)
	if holds == 0 { // without RETURNING, holds is unknown: wake anyway
		e.local.signal(h.Name)
	}
	return nil
}

// Inspect lists the held locks whose names start with prefix, in name
// order; see [dlock.Inspector]. Waiters is -1 (unknown): the waiters table
// has the fair waiters only (Queued counts them), and a non-fair waiter
// leaves no trace in the store, so a count would leave them out.
func (e *Engine) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	var out []dlock.LockInfo
	err := e.retry(ctx, func(ctx context.Context) error {
		out = nil
		rows, err := e.pool.QueryContext(ctx, e.q.inspect, prefix, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				in  dlock.LockInfo
				r   rawRow
				now int64
				s   lockState
			)
			if err := rows.Scan(&in.Name, &r.owner, &r.token, &r.holds, &r.expires, &now, &in.Queued, &r.badWaiters); err != nil {
				return err
			}
			in.Waiters = -1
			if !strings.HasPrefix(in.Name, prefix) {
				break // names are in byte order: the prefix's range is over
			}
			// A row that is not dlock's is listed with what could be read.
			in.Bad = e.checkRow(r, now, &s)
			in.Owner, in.Token, in.Count, in.TTL = s.owner, s.token, s.holds, max(s.remaining, 0)
			out = append(out, in)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		out, err = e.winspect(ctx, out) // a holder per row of weighted names
		return err
	})
	if err != nil {
		return nil, e.wrap(err)
	}
	return out, nil
}

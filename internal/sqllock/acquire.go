package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

// NoSeq is the queue position of a request that is not in the fair queue:
// behind every queued waiter.
const NoSeq = math.MaxInt64

// ttlMillis converts a TTL to whole milliseconds, rounding up, without
// overflow.
func ttlMillis(d time.Duration) int64 {
	return max(dur.Ceil(d, time.Millisecond), 1)
}

func checkRequest(req dlock.Request) error {
	switch {
	case req.Name == "":
		return errorf(dlock.ErrInvalidName, "empty name")
	case req.Owner == "":
		return errorf(dlock.ErrInvalidOption, "empty owner")
	case req.TTL <= 0:
		return errorf(dlock.ErrInvalidOption, "TTL %v is not positive", req.TTL)
	}
	return nil
}

// attempt makes one conditional grant of req for a requester at queue
// position seq, on q (the pool, or a connection in a transaction).
func (e *Engine) attempt(ctx context.Context, q querier, req dlock.Request, seq int64) (dlock.Grant, bool, error) {
	ttl := ttlMillis(req.TTL)
	if e.d.Attempt != nil {
		return e.d.Attempt(ctx, q, e.table, req, ttl, seq)
	}
	var g dlock.Grant
	if e.d.Returning {
		args := append(NewRowArgs(req.Name, req.Owner, ttl, seq), SetArgs(req.Owner, ttl)...)
		args = append(args, CondArgs(req.Owner, req.Name, seq)...)
		ok, err := queryOne(ctx, q, e.q.upsert, args, &g.Token, &g.Count)
		return g, ok, err
	}
	// Without RETURNING: make sure the row exists, update it on the same
	// conditions, read the result — in one transaction.
	run := func(c querier) (bool, error) {
		if _, err := c.ExecContext(ctx, e.q.ensure, req.Name, req.Name, req.Name, seq); err != nil {
			return false, err
		}
		args := append(SetArgs(req.Owner, ttl), req.Name)
		args = append(args, CondArgs(req.Owner, req.Name, seq)...)
		res, err := c.ExecContext(ctx, e.q.update, args...)
		if err != nil {
			return false, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return false, err
		}
		return queryOne(ctx, c, e.q.granted, []any{req.Name}, &g.Token, &g.Count)
	}
	if c, ok := q.(*sql.Conn); ok {
		ok, err := run(c)
		return g, ok, err
	}
	var ok bool
	err := e.tx(ctx, func(c *sql.Conn) error {
		var err error
		ok, err = run(c)
		return err
	})
	return g, ok, err
}

// lockState is a lock's state as the database saw it.
type lockState struct {
	exists    bool
	owner     string
	token     uint64
	holds     int
	remaining time.Duration // of the holder's lease; <= 0 when expired
	head      int64         // the sequence of the first live fair waiter; NoSeq if none
	queueTTL  time.Duration // remaining life of the first live fair waiter to expire
	fault     string        // what makes the row (or its waiter rows) foreign data; "" if none
}

// ahead reports whether a live fair waiter is queued before seq. The
// state does not depend on who asks, so one look serves every waiter of
// the process, fair or not.
func (s lockState) ahead(seq int64) bool { return s.head < seq }

// held reports whether another owner than owner holds the lock.
func (s lockState) heldByOther(owner string) bool {
	return s.exists && s.owner != "" && s.holds > 0 && s.remaining > 0 && s.owner != owner
}

// heldBy reports whether owner holds the lock.
func (s lockState) heldBy(owner string) bool {
	return s.exists && s.owner == owner && s.holds > 0 && s.remaining > 0
}

// mayAcquire reports whether an attempt by owner at queue position seq
// could succeed.
func (s lockState) mayAcquire(owner string, seq int64) bool {
	return s.fault == "" && (s.heldBy(owner) || !s.heldByOther(owner) && !s.ahead(seq))
}

// state reads the state of name's lock on q.
func (e *Engine) state(ctx context.Context, q querier, name string) (lockState, error) {
	var (
		s        lockState
		r        rawRow
		now      int64
		head     sql.NullInt64
		queueExp sql.NullInt64
	)
	// The columns are read as stored and checked here (see RowOK), so that
	// a row dlock did not write is reported, not a Scan error.
	var exists int64
	ok, err := queryOne(ctx, q, e.q.state, []any{name},
		&r.owner, &r.token, &r.holds, &r.expires, &now, &head, &queueExp, &r.badWaiters, &exists)
	if err != nil || !ok {
		return lockState{}, err
	}
	s.exists = exists == 1
	s.fault = e.checkRow(r, now, &s)
	s.head = NoSeq
	if head.Valid {
		s.head = head.Int64
	}
	if queueExp.Valid {
		s.queueTTL = time.Duration(queueExp.Int64-now) * time.Millisecond
	}
	return s, nil
}

// refusal is the error of an attempt on name by owner at queue position
// seq, refused in state s.
func (e *Engine) refusal(name string, s lockState, owner string, seq int64) error {
	if s.fault != "" {
		return e.foreign(name, s.fault)
	}
	if err := markConflict(s.owner); err != nil {
		return err // a weighted name
	}
	if s.heldByOther(owner) {
		return &dlock.HeldError{Holder: dlock.Holder{Owner: s.owner, Token: s.token, TTL: s.remaining}}
	}
	if s.ahead(seq) {
		return errorf(dlock.ErrNotAcquired, "free, but fair waiter(s) are queued first")
	}
	return errorf(dlock.ErrNotAcquired, "taken and released by others meanwhile")
}

// try makes the attempts of a request that is not in the fair queue: when
// an attempt is refused but the state read right after says the lock is
// free, it tries again (a few times), so that a refusal comes with the
// holder that caused it. It returns that state with the refusal. Each
// attempt and its read take one turn of the name (see writeName), so that
// a herd of this process's waiters uses one connection.
func (e *Engine) try(ctx context.Context, req dlock.Request) (dlock.Grant, lockState, error) {
	var s lockState
	for range 3 {
		g, ok, st, err := e.attemptOrLook(ctx, req)
		s = st
		if err != nil {
			return dlock.Grant{}, s, e.wrap(err)
		}
		if ok {
			e.local.forget(req.Name)
			e.maybeSweep(ctx)
			return g, s, nil
		}
		if !s.mayAcquire(req.Owner, NoSeq) {
			break
		}
	}
	return dlock.Grant{}, s, e.refusal(req.Name, s, req.Owner, NoSeq)
}

// attemptOrLook makes one attempt for req and, when it is refused, reads
// the lock's state, both in one turn of the name (see writeName).
func (e *Engine) attemptOrLook(ctx context.Context, req dlock.Request) (g dlock.Grant, ok bool, s lockState, err error) {
	err = e.writeName(ctx, req.Name, func(ctx context.Context) error {
		var err error
		if g, ok, err = e.attempt(ctx, &e.pool, req, NoSeq); err != nil || ok {
			return err
		}
		s, err = e.state(ctx, &e.pool, req.Name)
		return err
	})
	return g, ok, s, err
}

// Acquire makes one attempt to grant req; see [dlock.Backend]. It is one
// statement when granted. A fair request that will wait and is refused
// then takes its place in the fair queue.
func (e *Engine) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := e.checkOpen(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if err := checkRequest(req); err != nil {
		return dlock.Grant{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if req.Kind != dlock.KindMutex {
		return e.wacquire(ctx, req)
	}
	if !(req.Fair && req.Wait) {
		g, _, err := e.try(ctx, req)
		if err != nil && req.Wait && errors.Is(err, dlock.ErrNotAcquired) {
			return dlock.Grant{}, e.newWaiter(req, NoSeq, time.Time{}), err
		}
		return g, nil, err
	}
	// The attempt alone first, in one statement: a free lock needs no
	// more. Only when it is refused does the request take its place: a
	// row at the end of the queue, written without holding the lock's
	// row, so that the release a waiter is waiting for is never held up
	// by a newcomer. A release between the attempt and the queueing is
	// not missed: the waiter subscribes to the feed, then looks.
	g, ok, s, err := e.attemptOrLook(ctx, req)
	switch {
	case err != nil:
		return dlock.Grant{}, nil, e.wrap(err)
	case ok:
		e.local.forget(req.Name)
		e.maybeSweep(ctx)
		return g, nil, nil
	case s.fault != "":
		return dlock.Grant{}, nil, e.foreign(req.Name, s.fault) // nothing queued
	case isMark(s.owner):
		return dlock.Grant{}, nil, markConflict(s.owner) // a weighted name
	}
	var seq int64
	sent := time.Now()
	err = e.writeName(ctx, req.Name, func(ctx context.Context) error {
		var err error
		seq, err = e.enqueue(ctx, &e.pool, req)
		return err
	})
	if err != nil {
		return dlock.Grant{}, nil, e.wrap(err)
	}
	return dlock.Grant{}, e.newWaiter(req, seq, sent), e.refusal(req.Name, s, req.Owner, NoSeq)
}

// enqueue adds req to the end of the fair queue, sweeping out the waiters
// of its name that died, and returns its sequence number.
func (e *Engine) enqueue(ctx context.Context, c querier, req dlock.Request) (int64, error) {
	args := []any{req.Name, req.Owner, ttlMillis(e.wttl)}
	var seq int64
	if e.q.sweepEnqueue != "" {
		ok, err := queryOne(ctx, c, e.q.sweepEnqueue, append([]any{req.Name}, args...), &seq)
		if err == nil && !ok {
			err = errors.New("INSERT … RETURNING seq returned no row")
		}
		return seq, err
	}
	if _, err := c.ExecContext(ctx, e.q.sweepName, req.Name); err != nil {
		return 0, err
	}
	if e.d.Returning {
		ok, err := queryOne(ctx, c, e.q.enqueue, args, &seq)
		if err == nil && !ok {
			err = errors.New("INSERT … RETURNING seq returned no row")
		}
		return seq, err
	}
	res, err := c.ExecContext(ctx, e.q.enqueue, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Kind is what a lock name is used as. A store records a name's kind and
// limit with the grant that starts its state and keeps them while the name
// has holders or waiters; a request of another kind or limit is refused
// with a [*ConflictError] and changes nothing.
type Kind uint8

// The kinds. The zero Kind is a mutex, so a Request built without one is a
// mutex request.
const (
	// KindMutex: one holder at a time (limit 1, weight 1).
	KindMutex Kind = iota
	// KindSemaphore: at most Limit weight held at once.
	KindSemaphore
	// KindRWMutex: a reader weighs 1 and a writer [RWLimit], out of
	// RWLimit.
	KindRWMutex
	// KindElection: a mutex whose holder, the leader, publishes a value.
	KindElection
)

// String returns the kind's name as messages show it.
func (k Kind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindSemaphore:
		return "semaphore"
	case KindRWMutex:
		return "read-write lock"
	case KindElection:
		return "election"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Limits of weighted grants.
const (
	// MaxLimit is the largest limit of a semaphore: weights stay exact in
	// every store's arithmetic (Lua numbers, SQL integers) with room to
	// add them up.
	MaxLimit = 1 << 20
	// RWLimit is the limit of a read-write lock: a reader weighs 1 and a
	// writer all of it, so at most RWLimit readers hold it at once.
	RWLimit = MaxLimit
)

// Shape returns how messages describe kind k with limit: "mutex",
// "semaphore of 10", "read-write lock".
func Shape(k Kind, limit int) string {
	if k == KindSemaphore {
		return fmt.Sprintf("semaphore of %d", limit)
	}
	return k.String()
}

// ConflictError is the cause a backend gives when a request's kind or limit
// disagrees with what the store records for the name (a semaphore of 10
// asked of one of 20, a mutex asked of a semaphore). It matches
// [ErrInvalidOption]; nothing was changed.
type ConflictError struct {
	Kind       Kind // what the store records
	Limit      int
	AskedKind  Kind // what the request asked
	AskedLimit int
}

// Error names both shapes.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("the name is in use as a %s; asked as a %s", Shape(e.Kind, e.Limit), Shape(e.AskedKind, e.AskedLimit))
}

// Is makes a ConflictError match ErrInvalidOption.
func (e *ConflictError) Is(target error) bool { return target == ErrInvalidOption }

// Conflict returns a *ConflictError if the recorded kind and limit differ
// from req's, and nil otherwise: the check every backend makes before it
// grants or queues a request of a name that has state.
func Conflict(kind Kind, limit int, req Request) error {
	if kind == req.Kind && limit == req.Limit {
		return nil
	}
	return &ConflictError{Kind: kind, Limit: limit, AskedKind: req.Kind, AskedLimit: req.Limit}
}

// ErrUpgrade is the cause when an owner that holds a name asks for more
// weight than it holds — a reader asking to write. Waiting for the other
// readers could deadlock (two readers each waiting for the other), so it
// is refused at once; it matches [ErrInvalidOption]. Unlock the read lease
// and Lock for writing instead.
var ErrUpgrade = fmt.Errorf("%w: the owner holds the name with less weight than it asks (a reader cannot become a writer: that could deadlock)", ErrInvalidOption)

// Granter is implemented by backends that grant more kinds than the mutex.
// CanGrant returns nil if the backend keeps every rule of the contract for
// kind with limit, and otherwise an error saying why not (a Redlock cannot
// bound a count above 1 with majority quorums). The Client asks it before
// any request of a kind other than [KindMutex]; a backend that does not
// implement it grants mutexes only.
//
// A backend that grants weighted kinds applies, in one atomic step, the
// grant rule: the weights of the unexpired holders plus the request's fit
// in the limit, and the request does not pass an earlier waiter (the
// Client makes every waiting request of a weighted kind Fair, so the
// store's queue is strict arrival order, as in golang.org/x/sync's
// semaphore.Weighted: a waiting writer holds back every later reader). A
// release that frees room wakes the first waiter; a waiter that is granted
// wakes the next, so every waiter that now fits is woken and no other.
// Tokens come from one counter per name shared by every kind.
type Granter interface {
	CanGrant(kind Kind, limit int) error
}

// Downgrader is implemented by backends that can lower the weight of a
// hold in place (a writer becoming a reader) without releasing it, so that
// no other writer comes in between; the token is unchanged and waiters
// that now fit are woken. A weight above the hold's is refused (matching
// [ErrUpgrade]); a hold that is no longer held is [ErrLeaseLost].
type Downgrader interface {
	Downgrade(ctx context.Context, h Hold, weight int) error
}

// canGrant reports whether c's backend grants kind with limit.
func (c *Client) canGrant(kind Kind, limit int) error {
	if kind == KindMutex {
		return nil
	}
	if g, ok := c.b.(Granter); ok {
		return g.CanGrant(kind, limit)
	}
	return fmt.Errorf("%w: the backend grants mutexes only, not a %s", errors.ErrUnsupported, Shape(kind, limit))
}

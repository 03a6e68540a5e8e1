package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// sentinel is the type of the package's sentinel errors. Its message carries
// the "dlock: " prefix only when printed on its own; inside an [*Error] the
// prefix is written once for the whole message.
type sentinel struct{ msg string }

func (s *sentinel) Error() string { return "dlock: " + s.msg }

// The sentinel errors. Every error returned by this package and by the
// backends wraps one of them (or a cause from the backend's store), so test
// with [errors.Is]; the error's text names the lock and the backend.
var (
	// ErrNotAcquired means the lock is held by another owner: TryLock found it
	// held, or Lock gave up because its context ended (then the error also
	// matches ctx.Err()).
	ErrNotAcquired error = &sentinel{"not acquired"}

	// ErrLeaseLost means a lease is no longer valid: the backend gave the lock
	// to another owner or expired it, renewal failed until the lease's
	// deadline, MaxHold was reached, or the process was paused past the
	// deadline. A release of a lost lease never touches the new holder.
	ErrLeaseLost error = &sentinel{"lease lost"}

	// ErrUnlocked means the lease was already released by Unlock.
	ErrUnlocked error = &sentinel{"lease already unlocked"}

	// ErrInvalidName means a lock name is empty, longer than 255 bytes, not
	// valid UTF-8 or contains a NUL byte.
	ErrInvalidName error = &sentinel{"invalid lock name"}

	// ErrInvalidOption means an option or a URL is not valid, for example a
	// TTL that is not positive or MaxHold below the TTL.
	ErrInvalidOption error = &sentinel{"invalid option"}

	// ErrClosed means the Client was closed. Leases still held when Close was
	// called report it as their cause of loss.
	ErrClosed error = &sentinel{"client closed"}

	// ErrBackendUnavailable means the backend's store could not be reached
	// or did not answer in time.
	ErrBackendUnavailable error = &sentinel{"backend unavailable"}

	// ErrNoQuorum means a quorum-based backend (Redlock) did not get a
	// majority of its nodes; the error names the nodes that failed and why.
	ErrNoQuorum error = &sentinel{"no quorum"}

	// ErrForeignData means a record where a backend keeps a lock's state
	// (an SQL row, a Redis hash, a ZooKeeper node, an etcd key) holds data
	// that dlock did not write: a value it cannot read, a count out of
	// range, a fencing token at the top of its range (no later token could
	// be given). The operation changed nothing; the error names the
	// backend and the record. Inspect lists such records marked in
	// [LockInfo].Bad. Remove or repair the record, or use another table,
	// prefix or namespace.
	ErrForeignData error = &sentinel{"foreign data"}
)

var sentinels = []error{
	ErrNotAcquired, ErrLeaseLost, ErrUnlocked, ErrInvalidName,
	ErrInvalidOption, ErrClosed, ErrBackendUnavailable, ErrNoQuorum,
	ErrForeignData,
}

// Error is the error type returned by Client, Mutex and Lease methods. It
// names the operation, the lock and the backend, and wraps both the sentinel
// that classifies it (Kind) and the cause (Err), so errors.Is matches either.
type Error struct {
	Op      string // "lock", "trylock", "unlock", "extend", "renew", "open", "inspect"
	Name    string // the lock's name as the caller gave it; empty for client operations
	Backend string // the backend's description, e.g. "sqlite /var/lib/x.db"
	Kind    error  // one of the package's sentinels, or nil
	Err     error  // the cause, or nil
}

// Error formats the error as "dlock: OP "NAME" on BACKEND: KIND: CAUSE".
func (e *Error) Error() string {
	var b []byte
	b = append(b, "dlock: "...)
	b = append(b, e.Op...)
	if e.Name != "" || e.Op == "lock" || e.Op == "trylock" {
		b = append(b, ' ')
		b = append(b, quoteCut(e.Name)...)
	}
	if e.Backend != "" {
		b = append(b, " on "...)
		b = append(b, e.Backend...)
	}
	var cause string
	if e.Err != nil {
		cause = e.Err.Error()
	}
	if e.Kind != nil {
		kind := e.Kind.Error()
		if s, ok := e.Kind.(*sentinel); ok {
			cause = sayOnce(cause, kind)
			kind = s.msg
		}
		b = append(b, ": "...)
		b = append(b, kind...)
	}
	if cause != "" {
		b = append(b, ": "...)
		b = append(b, cause...)
	}
	return string(b)
}

// sayOnce removes from a cause the text of the kind the Error prints
// itself: a backend's cause usually wraps the kind, at its start
// ("dlock: backend unavailable: dial ...") or after its own words
// ("redis 10.0.0.1:6379: dlock: backend unavailable: dial ..."). The
// other sentinels lose their "dlock: ", which the Error prints once.
func sayOnce(cause, kind string) string {
	if i := strings.Index(cause, kind); i >= 0 {
		rest := cause[i+len(kind):]
		if r, ok := strings.CutPrefix(rest, ": "); ok || rest == "" {
			cause = strings.TrimSuffix(cause[:i], ": ")
			if cause != "" && r != "" {
				cause += ": "
			}
			cause += r
		}
	}
	for _, s := range sentinels {
		cause = strings.ReplaceAll(cause, s.Error(), s.(*sentinel).msg)
	}
	return cause
}

// Unwrap returns the kind and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// maxEcho is how many bytes of a user's input (a name, an owner) an error
// message quotes.
const maxEcho = 64

// quoteCut quotes s for an error message, cut to maxEcho bytes (at a rune
// boundary) with its length when longer: a 10 KB name must not make a
// 10 KB message.
func quoteCut(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	i := maxEcho
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:i], len(s))
}

// HeldError is the cause a backend gives with [ErrNotAcquired] when it knows
// who holds the lock. Find it with errors.As.
type HeldError struct {
	// Holder is the holder a waiter watches: the only one of a mutex, the
	// one whose lease ends first of a name with several.
	Holder Holder
	// Held and Limit are the weight held and the name's limit when the
	// name can have several holders; 0 for a mutex.
	Held, Limit int
	// Queued is the number of earlier waiters the request may not pass
	// (a weighted name's queue), when the store knows it.
	Queued int
}

// Holder describes the holder of a lock as the backend saw it.
type Holder struct {
	Owner string        // the holder's owner id
	Token uint64        // the holder's fencing token, 0 if unknown
	TTL   time.Duration // the holder's remaining lease by the backend's clock, 0 if unknown
}

// Error says who holds the lock.
func (e *HeldError) Error() string {
	s := "held by " + quoteCut(e.Holder.Owner)
	if e.Limit > 0 {
		s = fmt.Sprintf("%d of %d held", e.Held, e.Limit)
		if e.Queued > 0 {
			s += fmt.Sprintf(", %d waiter(s) first", e.Queued)
		}
		if e.Holder.Owner == "" {
			return s
		}
		s += "; first to expire: " + quoteCut(e.Holder.Owner)
	}
	if e.Holder.Token != 0 {
		s += fmt.Sprintf(" (token %d)", e.Holder.Token)
	}
	if e.Holder.TTL > 0 {
		s += fmt.Sprintf(", expires in %v", e.Holder.TTL.Round(time.Millisecond))
	}
	return s
}

// Is makes a HeldError match ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// kindOf returns the first package sentinel that err matches, or nil.
func kindOf(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// lostError is the error of a lease that is over. It matches ErrLeaseLost
// (or ErrUnlocked, ErrClosed) and, because it is also what the lease's
// Context().Err() returns, context.Canceled or, when the validity deadline
// passed, context.DeadlineExceeded.
type lostError struct {
	err      *Error
	deadline bool
}

func (e *lostError) Error() string { return e.err.Error() }

func (e *lostError) Is(target error) bool {
	if e.deadline {
		return target == context.DeadlineExceeded
	}
	return target == context.Canceled
}

func (e *lostError) Unwrap() error { return e.err }

// chain is like errors.Join, but its text is one line: the errors' texts
// joined by ": ".
type chain []error

func (c chain) Error() string {
	s := make([]string, len(c))
	for i, e := range c {
		s[i] = e.Error()
	}
	return strings.Join(s, ": ")
}

func (c chain) Unwrap() []error { return c }

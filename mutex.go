package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
)

// Mutex is a named distributed lock of a Client. It holds no state of its
// own beyond its options: every Lock or TryLock is a separate acquisition
// that returns its own Lease. A Mutex is safe for concurrent use; two
// goroutines that lock the same Mutex exclude each other unless they share
// an explicit Owner or pass a lease with WithLease.
type Mutex struct {
	spec
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Lock acquires the lock, waiting until it is granted or ctx is done. While
// waiting it is woken by the backend when the lock is released (or when the
// holder's lease runs out) rather than polling.
//
// If ctx carries a lease of the same lock (see [WithLease]) or the Mutex
// has an explicit [Owner] that holds it, Lock re-enters: it returns at once
// with the holder's token, and the lock frees after as many Unlocks.
//
// If ctx ends first, Lock returns an error matching both [ErrNotAcquired]
// and ctx.Err(), and leaves nothing behind: its place in any queue is
// withdrawn, so nobody after it is delayed. It returns at the latest
// [CancelGrace] after ctx ends, even if the store stopped answering (the
// error then also matches [ErrBackendUnavailable]). A grant that reached
// the store but whose answer was cut off is released in the background
// once the store answers again (for an owner made for this Lock, on a
// backend that implements [Inspector]); otherwise it expires with its TTL.
//
// Lock never returns a lease that is already over: a grant whose answer
// arrives after the validity the client can promise (the store stalled
// longer than the TTL, as in a failover) is renewed first, and if it was
// lost meanwhile Lock waits again (TryLock reports [ErrNotAcquired]).
//
// If the backend cannot be reached on the first attempt, Lock returns an
// error matching [ErrBackendUnavailable] at once. A store that hangs
// without closing the connection fails the attempt the same way once the
// backend's request timeout has passed, even under a ctx without a
// deadline: Redis's client read timeout, about 10 s on etcd and ZooKeeper
// (see their package docs). Once it is waiting, it
// rides out such errors (a server restart, an election), trying again with
// a backoff of up to a second until it is granted or ctx ends.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, "lock", true, "")
}

// TryLock acquires the lock if it is free (or re-enters it, as Lock does)
// and otherwise returns at once with an error matching [ErrNotAcquired];
// errors.As with a [*HeldError] tells who holds it when the backend knows.
// It never waits for the lock, only for the backend's answer, and that at
// most for the backend's request timeout (see Lock).
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, "trylock", false, "")
}

// CheckName reports whether name is a valid lock name: 1-255 bytes of
// valid UTF-8 without NUL. The error matches [ErrInvalidName]. Lock and
// TryLock check names themselves; CheckName lets a program refuse a bad
// name before it connects to a backend.
func CheckName(name string) error {
	if msg := validName(name, MaxNameLen); msg != "" {
		return &Error{Op: "check", Name: name, Kind: ErrInvalidName, Err: fmt.Errorf("name %s", msg)}
	}
	return nil
}

var ownerPrefix = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d/", host, os.Getpid())
}()

// newOwner returns a fresh owner id: host and pid for people reading
// `dlock status`, and 128 random bits so that no two acquisitions share it.
func newOwner() string {
	var b [16]byte
	var h [32]byte
	rand.Read(b[:])
	hex.Encode(h[:], b[:])
	var s strings.Builder // one allocation
	s.Grow(len(ownerPrefix) + len(h))
	s.WriteString(ownerPrefix)
	s.Write(h[:])
	return s.String()
}

type leaseKey struct{}

// WithLease returns a context that carries lease l. A Lock or TryLock of the
// same lock name on the same backend with this context re-enters l instead
// of waiting for it: it gets l's token and a hold count kept on the backend,
// and must be unlocked on its own. Locks of other names are not affected.
func WithLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFrom returns the lease carried by ctx (see [WithLease]), or nil.
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// retryDelay is how soon a renewal that failed without losing the lease is
// tried again: often enough for several tries within the lease.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 5*time.Millisecond), time.Second)
}

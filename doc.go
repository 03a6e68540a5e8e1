// Package dlock implements distributed locks with fencing tokens, leases
// that renew themselves and report when they are lost, fair queueing,
// reentrancy by explicit identity, and waiters that are woken instead of
// polling, over a pluggable [Backend].
//
// # Use
//
// Open a [Client] by URL with [Open] (import the backend package for its
// URL scheme, as with database/sql drivers) or with [New] on a backend
// value. A [Mutex] names one lock: [Mutex.Lock] waits until the lock is
// granted, [Mutex.TryLock] never waits; both return a [Lease], which
// [Lease.Unlock] gives back. The package example shows the whole cycle.
//
// # Leases
//
// The Client renews every lease in the background every TTL/3. A lease is
// valid until [Lease.Deadline]: the send time of the last successful
// acquire or renewal plus TTL × (1 − drift), a moment before the backend
// can have given the lock to anyone else. When the lease is lost — another
// owner has it, renewal failed until the deadline, [MaxHold] was reached,
// the Client was closed — [Lease.Done] is closed, [Lease.Context] is
// cancelled and [Lease.Err] reports [ErrLeaseLost]. Lease.Err reads the
// monotonic clock on every call, so a process that resumes from a pause
// learns of the loss at its next check.
//
// # Fencing
//
// No lock service can stop a paused process from acting on a lease it no
// longer holds. [Lease.Token] strictly increases with every new grant of a
// lock name: give it to the protected resource and let the resource refuse
// writes with a lower token than one it has seen (package fence has guards
// for that).
//
// # Errors
//
// Every error names the lock and the backend and matches one of the
// sentinels ([ErrNotAcquired], [ErrLeaseLost], [ErrInvalidName],
// [ErrInvalidOption], [ErrClosed], [ErrBackendUnavailable], [ErrNoQuorum],
// [ErrUnlocked], [ErrForeignData]); test with [errors.Is].
//
// # Backends
//
// A backend implements [Backend] (see there for the contract and for
// writing one); package mem is an in-process backend and the template to
// copy, and package dlocktest checks any backend against the contract.
package dlock

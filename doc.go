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
// # Semaphores, read-write locks and elections
//
// Every primitive is a lease of a weight out of a name's limit, granted by
// the same engine: a [Mutex] is 1 of 1; a [Semaphore] of N grants permits
// of a [Weight] while they fit; an [RWMutex] grants readers 1 and a writer
// all ([Lease.Downgrade] turns a writer into a reader in place); an
// [Election] is a mutex whose leader publishes a value ([Election.Observe]
// follows every change of leader). The store records a name's [Kind] and
// limit while it has holders or waiters and refuses another with a
// [*ConflictError]. Waiters of weighted kinds queue in arrival order, so a
// waiting writer holds back later readers. [Client.Watch] follows any
// name's holders, pushed by the store where the backend can.
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
// [ErrUnlocked], [ErrForeignData]); test with [errors.Is]. [ErrUpgrade]
// and [ErrNoLeader] are finer causes of ErrInvalidOption and of a
// Leader call.
//
// # Observability
//
// The library is silent unless given [WithLogger]. A [Tracer] set with
// [WithTracer] sees every acquisition, wait, renewal and lease end with
// a typed [EndCause]; the otel and prometheus modules of this repository
// adapt it. Without one the lock path only tests a nil.
//
// # Backends
//
// A backend implements [Backend] (see there for the contract and for
// writing one); package mem is an in-process backend and the template to
// copy, and package dlocktest checks any backend against the contract.
package dlock

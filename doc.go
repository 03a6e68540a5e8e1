// Package dlock implements distributed locks with fencing tokens, leases that
// renew themselves and report when they are lost, fair queueing, reentrancy by
// explicit identity and waiters that are woken instead of polling, over a
// pluggable [Backend].
//
// A [Client] is opened on a backend, either by URL with [Open] (the backend
// package must be imported for its URL scheme to be known, as with
// database/sql drivers) or with [New] on a backend value. A [Mutex] names one
// lock; [Mutex.Lock] waits until the lock is granted and [Mutex.TryLock]
// never waits. Both return a [Lease]:
//
//	lease, err := c.Mutex("billing/nightly-close", dlock.TTL(15*time.Second)).Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer lease.Unlock(context.Background())
//	return doWork(lease.Context(), lease.Token())
//
// The lease is renewed in the background (one renewal loop per Client) every
// TTL/3. Its validity ends at [Lease.Deadline]: the send time of the last
// successful acquire or renewal plus TTL × (1 − drift), a moment before the
// backend can have given the lock to anyone else. When the lease is lost —
// the backend says another owner has it, renewal failed until the deadline,
// [MaxHold] was reached or the Client was closed — [Lease.Done] is closed,
// [Lease.Context] is cancelled and [Lease.Err] reports [ErrLeaseLost].
// [Lease.Err] compares the monotonic clock with the deadline on every call,
// so a process that resumes from a pause learns of the loss at its next
// check, even before any background goroutine has run.
//
// No lock service can stop a paused process from acting on a lease it no
// longer holds. [Lease.Token] is a fencing token that strictly increases with
// every new grant of a lock name; give it to the protected resource and let
// the resource reject writes that carry a lower token than one it has seen
// (package fence has guards for that).
//
// Every error names the lock and the backend and wraps one of the sentinel
// errors ([ErrNotAcquired], [ErrLeaseLost], [ErrInvalidName],
// [ErrInvalidOption], [ErrClosed], [ErrBackendUnavailable], [ErrNoQuorum],
// [ErrUnlocked]); test for them with [errors.Is].
package dlock

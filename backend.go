package dlock

import (
	"context"
	"time"
)

// Backend is the contract a lock store implements. It holds only the atomic
// store operations; everything about time — renewal every TTL/3, local
// validity deadlines, MaxHold, loss reporting — is done once, by the Client.
//
// The same contract fits try-based stores (Redis, SQL: an atomic
// compare-and-set, then a wait for a release notice or the holder's
// remaining TTL) and queue-based stores (ZooKeeper, etcd: enqueue, then wait
// for the predecessor), because a waiting acquisition is a [Waiter] whose
// state belongs to the backend.
//
// Rules every implementation keeps (the suite in package dlocktest checks
// them):
//
//   - Exclusion: at most one owner holds a name at any moment as judged by
//     the store's own clock. Expiry is judged by the store (Redis PX, SQL
//     now(), a ZooKeeper session, an etcd lease), never by comparing client
//     clocks.
//   - Tokens: every new grant of a name gets a token strictly greater than
//     every earlier grant's of that name, for the lifetime of the store's
//     data (surviving release and expiry). A reentrant grant returns the
//     holder's token unchanged.
//   - Reentrancy: a request whose Owner already holds the name is granted at
//     once with Count incremented; Release decrements the count and frees
//     the name at zero. Counts live in the store.
//   - Ownership: Renew and Release act only when Hold.Owner still holds the
//     name with Hold.Token; otherwise they change nothing and return an error
//     matching [ErrLeaseLost].
//   - Errors: not granted is an error matching [ErrNotAcquired] (ideally a
//     [*HeldError]); a store that cannot be reached matches
//     [ErrBackendUnavailable]. Any other error is taken as transient by
//     renewals and as fatal by acquisitions.
//   - Context: every call returns soon after its ctx ends, with an error
//     that matches ctx.Err(); a write that was sent may be seen through
//     for a moment, but not waited for while the store is silent. The
//     Client stops waiting [CancelGrace] after ctx ended and leaves such a
//     call running in the background, undoing its grant when it ends.
//   - Cleanliness: a failed or cancelled acquisition leaves nothing behind;
//     Close stops every goroutine and connection the backend started (but
//     not a client the caller passed in).
//
// All methods must be safe for concurrent use.
//
// Writing a backend: copy mem/mem.go, the smallest complete backend (one
// mutex stands for the store's atomicity; its comments say why each step
// is there), and replace its map with the store's operations. Assert
// var _ dlock.Backend = (*Backend)(nil), and run dlocktest.Run in the
// backend's tests against a real server: it checks every rule above.
// Then implement what the store allows of the optional interfaces, which
// the Client finds by type assertion:
//
//   - [BatchRenewer]: renew every due lease in one round trip per tick.
//   - [Inspector]: list holders, for Client.Inspect and `dlock status`,
//     and let a Lock whose answer was cut off release its grant.
//   - [Migrator]: create the store's schema ahead of use (`dlock migrate`).
//   - [TTLLimiter]: refuse a TTL the store cannot keep (a session timeout).
//   - [LossReporter]: end leases the store says are lost before the next
//     renewal would tell.
//
// Register a URL scheme with [Register] in the package's init so that
// [Open] and the dlock command can reach the backend by URL.
type Backend interface {
	// Acquire makes one attempt to grant req. When granted it returns the
	// Grant. When the name is held by another owner it returns an error
	// matching ErrNotAcquired; then, if req.Wait is true, it also returns a
	// non-nil Waiter that has already registered the request (a queue entry,
	// a subscription), and if req.Wait is false it leaves nothing behind.
	Acquire(ctx context.Context, req Request) (Grant, Waiter, error)

	// Renew extends the hold h to ttl from now, by the store's clock.
	Renew(ctx context.Context, h Hold, ttl time.Duration) error

	// Release gives up one hold of h (decrements the reentry count, frees
	// the name at zero) and wakes a waiter. h.Handle is nil when the
	// Client releases a hold it found with Inspect (a grant whose answer
	// was cut off by the end of its Lock's context).
	Release(ctx context.Context, h Hold) error

	// Close releases what the backend started. It does not release held
	// locks; the Client does that before calling Close.
	Close() error

	// String describes the backend and its address for error messages,
	// e.g. "redis 127.0.0.1:6379". It must not contain secrets.
	String() string
}

// Waiter is a registered, waiting acquisition. The Client calls Wait and
// Acquire alternately until Acquire grants or fails with an error other than
// ErrNotAcquired, or until the caller gives up, in which case it calls
// Cancel. Exactly one of "Acquire granted" or "Cancel called" ends every
// Waiter.
type Waiter interface {
	// Wait blocks until the lock may have become free for this waiter — a
	// release notice, the deletion of the predecessor, the holder's
	// remaining TTL has passed — or ctx is done (then it returns ctx.Err()).
	// It may return early; it must not poll at a fixed long interval.
	Wait(ctx context.Context) error

	// Acquire makes the next attempt, with the results of Backend.Acquire.
	Acquire(ctx context.Context) (Grant, error)

	// Cancel withdraws the waiter so that it holds up nobody. It is called
	// with a fresh context even when the caller's was cancelled.
	Cancel(ctx context.Context) error
}

// Request is an acquisition as the Client passes it to a Backend.
type Request struct {
	// Name is the lock's key on the backend: the caller's name, valid UTF-8
	// of 1-255 bytes without NUL, as the Client encodes it for its
	// namespace (at most MaxNamespaceLen+2 more bytes, so at most 321; the
	// encoding may add the byte 0x1F). Backends escape it as their store
	// needs.
	Name string
	// Owner identifies the holder; a request whose owner already holds the
	// name re-enters.
	Owner string
	// Fresh says that Owner is an id the Client made for this acquisition
	// alone (no [Owner] option, no outer lease): only a request through the
	// same Backend (a [WithLease] reentry, or the Client's own retry) can
	// re-enter the hold, so a backend that notes its reentries may release
	// the hold without checking the store for reentries from elsewhere.
	Fresh bool
	// TTL is how long the store keeps the grant without renewal.
	TTL time.Duration
	// Fair asks for grants in arrival order among fair waiters.
	Fair bool
	// Wait is false for a single attempt (TryLock) and true when the caller
	// will wait (Lock).
	Wait bool
	// Kind is what the name is used as; the zero Kind is a mutex. A
	// backend sees kinds other than KindMutex only if it implements
	// [Granter] and said yes to them.
	Kind Kind
	// Limit is the most weight the name's holders may hold at once: 1 for
	// a mutex and an election, N for a semaphore of N, [RWLimit] for a
	// read-write lock. The Client sets it to at least 1.
	Limit int
	// Weight is what this request holds of the limit, 1 <= Weight <=
	// Limit: 1 for a mutex and a reader, the whole limit for a writer.
	Weight int
	// Value is what the holder publishes (an election's leader value, at
	// most MaxValueLen bytes); "" for other kinds. The store keeps it
	// with the hold and shows it in LockInfo.Value.
	Value string
}

// Grant is a successful acquisition.
type Grant struct {
	// Token is the fencing token of the hold.
	Token uint64
	// Count is the reentry count after this grant: 1 for a new grant.
	Count int
	// Handle is backend-private state of the hold (a node path, a key); it
	// is given back in Hold.
	Handle any
	// Age says how long before the call that returned it the grant may
	// have been made: a Waiter whose grant was handed to it by a release
	// (rather than made by its own request) sets it to the time since that
	// release was sent. The lease's validity then counts from then. Zero
	// for a grant made by the call's own request.
	Age time.Duration
}

// Hold identifies a granted hold in Renew and Release.
type Hold struct {
	Name   string
	Owner  string
	Token  uint64
	Handle any
	Kind   Kind // the kind the hold was granted as
}

// Renewal is one item of a batched renewal.
type Renewal struct {
	Hold Hold
	TTL  time.Duration
}

// BatchRenewer is implemented by backends that can renew many holds in one
// round trip. The Client's renewal loop then renews everything that is due
// in one call per tick. The result has one error (or nil) per renewal, in
// order; a failure of the whole call is that error in every position.
type BatchRenewer interface {
	RenewBatch(ctx context.Context, rs []Renewal) []error
}

// LockInfo describes one holder of a lock as the store sees it, for
// Inspect and `dlock status`: a name with several holders (a semaphore, a
// read-write lock's readers) has a LockInfo per holder.
type LockInfo struct {
	Name    string        // the lock's name (the backend's key; in Client.Inspect without its namespace)
	Owner   string        // the holder's owner id
	Token   uint64        // the holder's fencing token
	Count   int           // the holder's reentry count
	Kind    Kind          // what the name is used as
	Limit   int           // the name's limit (1 for a mutex; 0 if unknown)
	Weight  int           // what this holder holds of the limit (1 for a mutex; 0 if unknown)
	Value   string        // what the holder publishes (an election's leader value)
	TTL     time.Duration // remaining lease by the store's clock; 0 if unknown
	Waiters int           // all waiters, fair or not (queue-based stores, mem); -1 if the store cannot see every waiter (Redis, SQL: non-fair waiters leave no trace)
	Queued  int           // the fair waiters in the store's queue, when Waiters is -1 (a lower bound of the waiters)
	// Bad is empty for a lock whose record dlock can read. For a record
	// holding data dlock did not write (see [ErrForeignData]) it says what
	// is wrong, and the other fields hold what could be read of it.
	Bad string
	// Namespace is the lock's namespace in Client.Inspect ("" for a lock
	// taken without one); backends leave it empty.
	Namespace string
}

// Inspector is implemented by backends that can list held locks. prefix
// limits the listing to names that start with it ("" lists all).
type Inspector interface {
	Inspect(ctx context.Context, prefix string) ([]LockInfo, error)
}

// Migrator is implemented by backends that keep a schema in their store
// (the SQL backends' lease and waiters tables). Migrate creates what is
// missing and checks what exists; it is safe to run from several processes
// at once. The backends also do it on first use; `dlock migrate` calls it
// to do it ahead of time, for instance with a more privileged user.
type Migrator interface {
	Migrate(ctx context.Context) error
}

// TTLLimiter is implemented by backends that can keep a lease only up to
// some TTL: a ZooKeeper session deletes its nodes one session timeout after
// the servers last heard from it, whatever the lease asked for. The Client
// refuses a TTL above MaxTTL (in Lock, TryLock and Extend) with
// [ErrInvalidOption] before it reaches the backend, so that a lease never
// promises more than the store keeps. A backend that does not implement it
// is held to the package's [MaxTTL], and so is one whose MaxTTL returns 0
// or less (a wrapper forwarding a backend that states none). MaxTTL may
// change while the backend lives (a new session); it is asked on every
// acquisition.
type TTLLimiter interface {
	MaxTTL() time.Duration
}

// LossReporter is implemented by backends that learn that a hold is lost
// before the Client's next renewal would tell — a ZooKeeper session that
// expired or, under a policy that counts it, a dropped connection. New
// calls ReportLoss once with the Client's handler; the backend then calls
// it for every hold it knows to be lost, from any goroutine. The handler
// ends the matching leases (their Done closes, Err reports ErrLeaseLost
// with the cause) at once; it does not block and never calls back into
// the backend, so the backend may call it while holding its own locks.
type LossReporter interface {
	ReportLoss(handler func(h Hold, cause error))
}

// Watcher is implemented by backends that can tell when the holders of a
// name may have changed — a grant, a release, an expiry, a new value —
// by the store's own push mechanism (pub/sub, a watch, NOTIFY). The Client
// reads the holders with [Inspector] after each signal, so a backend only
// signals; Client.Watch and Election.Observe are built on it.
type Watcher interface {
	// Watch subscribes to changes of name (the backend's key) and returns
	// once the subscription is in place, so that no change after it is
	// missed.
	Watch(ctx context.Context, name string) (Subscription, error)
}

// Subscription is a registered watch of a name.
type Subscription interface {
	// Wait blocks until the name's holders may have changed since the
	// subscription was made or the previous Wait returned, or until ctx
	// is done (then it returns ctx.Err()). It may return early. An error
	// other than ctx's means the subscription broke (a dropped
	// connection): the Client makes a new one and reads the holders
	// again, so that what changed meanwhile is reported.
	Wait(ctx context.Context) error
	// Close ends the subscription.
	Close() error
}

// Proclaimer is implemented by backends that grant elections: Proclaim
// replaces the value of hold h, which must still be held (otherwise an
// error matching [ErrLeaseLost]), and signals the name's watchers.
type Proclaimer interface {
	Proclaim(ctx context.Context, h Hold, value string) error
}

// Detacher is implemented by backends whose holds outlive the client (a
// Redis key with its expiry, an SQL lease row), for [MinHold]. CanDetach
// reports whether that is so now (false in a session mode, where the
// session's end frees the lock); Detach sets hold h to expire ttl from
// now by the store's clock and leaves it there, as a renewal would, for
// the store to expire.
type Detacher interface {
	CanDetach() bool
	Detach(ctx context.Context, h Hold, ttl time.Duration) error
}

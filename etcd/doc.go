// Package etcd is a dlock backend on etcd v3 (go.etcd.io/etcd/client/v3):
// one key per acquisition under the lock's prefix, on an etcd lease that
// the backend's holds of one TTL share, granted in create-revision order,
// with the key's create revision as the fencing token.
//
// [Open] dials a client of its own from a comma list of endpoints; [New]
// uses a *clientv3.Client the caller owns; the "etcd" URL scheme is
// [ParseURL] then Open. The details of everything below are in
// docs/backends/etcd.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/etcd.md.
//
// # Guarantees
//
//   - Exclusion rests on etcd's quorum: at most one key is the lowest under
//     a lock's prefix until it is deleted or its lease expires (by the
//     leader's clock alone). A hold is valid until the send time of its
//     last successful keep-alive plus TTL × (1 − drift), a moment before
//     etcd can expire it.
//   - Grants are in arrival order (fair whether or not [dlock.Fair] is
//     asked for). Two goroutines that share a Client exclude each other,
//     and a waiter whose lease expired while it waited gets
//     [dlock.ErrLeaseLost], never the lock (unlike concurrency.Mutex, etcd
//     issues 10756, 11360 and 11456).
//   - The fencing token is the key's create revision, which strictly
//     increases with every write to the cluster and survives restarts.
//   - Lease TTLs are whole seconds: a TTL is rounded up (the longest is
//     [dlock.MaxTTL]), and etcd raises one below its minimum (1.5 × the
//     election timeout) to it; this only delays the release of an
//     abandoned lock. An expired shared lease ends every hold of the
//     backend with that TTL.
//   - A key at the head of a queue that dlock did not write fails TryLock
//     and Lock with [dlock.ErrForeignData].
//
// # URL
//
//	etcd://[user:password@]host1:2379,host2:2379/prefix?connect_timeout=5s
//
// The hosts are the client endpoints (plain http), the path the [Prefix],
// the user information [Auth]; connect_timeout (or dial-timeout) is
// [ConnectTimeout]. See [ParseURL].
//
// # How it works
//
// The lock NAME lives under PREFIX/ESC(NAME)/ (ESC escapes "%" and "/").
// An acquisition puts PREFIX/ESC(NAME)/LEASEID-N in one transaction that
// also reads the holder and the key's predecessor; uncontended it is one
// round trip, and a release one deletion: a plain one for a hold whose
// owner the Client made for it alone (no [dlock.Owner], no outer lease)
// and that no reentry touched, a compare-and-delete otherwise (on etcd
// 3.4 every write transaction costs the server a copy of its write
// buffer, so a plain deletion is cheaper). A waiter waits for the
// deletion of its predecessor only, through long-lived watches shared by
// the backend's waiters, so a release wakes one waiter and a contended
// hand-off costs one enqueue and one release. Reentrancy happens only
// when the request's owner equals the owner stored in the holder's key.
// Requests that fail for want of a leader are retried for up to 10 s,
// each bounded by half the TTL (0.5 to 5 s), so that one acquisition
// attempt gives up with [dlock.ErrBackendUnavailable] after about 10 s at
// most even under a context without a deadline; a
// renewal is a keep-alive per lease plus a read of the holds' keys, batched
// ([Backend.RenewBatch]), so a key deleted by someone else is found gone
// by the first renewal a sixth of the TTL after the deletion, the second
// at the latest.
//
// # Semaphores and read-write locks
//
// The backend grants semaphores (limit 1 to [dlock.MaxLimit]), read-write
// locks and elections ([Backend.CanGrant]; elections below) with the mutex's keys, shared
// leases, renewals and releases; a request of a weighted kind is a key
// whose value also holds the kind, the name's limit and the key's weight
// (a reader 1, a writer [dlock.RWLimit]). A mutex's requests never take
// this path, and its transactions are unchanged.
//
// Grant rule. The queue is strict create-revision order (x/sync's
// head-of-line rule: a request that fits still waits behind an earlier
// waiter), so the granted keys are always the oldest ones, and a key is
// granted exactly when the weights of the keys up to and including it fit
// in the limit. Keys only join a queue at its end and no weight ever
// grows, so a granted key stays granted until it goes. An expired holder
// or waiter is gone with its lease, so it blocks nobody.
//
// Acquire. One transaction puts the key if no key of the name was created
// after the revision at which the queue was last read (at first: if the
// name has no keys; uncontended, that is the only request) and otherwise
// reads the whole queue, oldest first. From the reading it judges the
// request: a kind or limit other than the one the oldest key records is a
// [*dlock.ConflictError] and writes nothing; a key dlock did not write (a
// weight above its limit, a count below 1, an unknown kind) is
// [dlock.ErrForeignData] and writes nothing; a granted key of the same
// owner is re-entered (the same token, its count one more; more weight
// than it holds is [dlock.ErrUpgrade]); a request that fits, or one that
// waits, is put by the next transaction, guarded by that revision, so the
// put finds the queue as read less what was deleted since. A TryAcquire
// that does not fit writes nothing. The token is the key's create
// revision: one counter for every kind of the name, so a mutex granted
// after a semaphore's permit has a greater token, and a writer's is above
// every reader's before it. A fence that compares tokens tells only that
// a write comes from a grant at least as new as the last one it saw; for
// a semaphore, whose holders hold at once, it cannot tell two current
// holders apart.
//
// Waiting. Watching the predecessor, which is enough for a mutex, is not
// above a limit of 1: a writer behind ten readers needs all ten gone, and
// which goes last is unknown. Watching the key whose deletion could first
// let a waiter in would cost a read each time that key goes, up to one per
// key ahead. Instead, a waiter keeps the keys ahead of it, with their
// weights, from its reading, and the backend's one watch of the name's
// prefix (shared by its waiters of the name, kept across hand-offs, and
// for weighted names also seeing puts, so that a downgrade is seen) takes
// every deletion or lowered weight off that sum. A waiter is woken only
// when the keys ahead of it fit, and then is granted without another
// request when its shared lease was confirmed within an eighth of its TTL
// (otherwise one read and a keep-alive confirm it). So a release wakes
// exactly the waiters that now fit, a granted waiter needs no wake-up from
// the next (each judges for itself), and a release that frees too little
// costs the waiters no request. The cost: every change to a weighted
// name's keys — each enqueue included — is sent as an event to every
// backend with a waiter on the name, where the mutex's long queues watch
// one predecessor; and a reading is the whole queue, so an acquisition
// beside n keys reads n values. A waiter whose watch began after its
// reading reads the queue once more.
//
// Downgrade ([Backend.Downgrade]) rewrites the holder key's weight in a
// transaction guarded by its create revision (the token) and its mod
// revision: the key keeps its place, its lease and its token, no writer
// can come in between, and the waiters that now fit see the put.
//
// # Elections and watching
//
// An election ([dlock.Client.Election]) is a weighted name of limit 1: its
// requests take the weighted path above (a mutex's never do), so a
// candidate is queued in create-revision order, the leader is the oldest
// key, and the term is that key's create revision. A name used as a mutex
// refuses a campaign, and an election's name refuses a mutex, with a
// [*dlock.ConflictError], writing nothing. The key's value also holds
// what the candidate publishes, shown by Inspect ([dlock.LockInfo].Value).
// [Backend.Proclaim] rewrites it the way Downgrade rewrites a weight:
// one read, then a put guarded by the key's create revision (the term)
// and mod revision, so a leader whose key is gone (its lease expired, it
// resigned) gets [dlock.ErrLeaseLost] and changes nothing.
//
// [Backend.Watch] ([dlock.Watcher]; Client.Watch and Election.Observe use
// it) follows a name of any kind with the backend's watch of the name's
// prefix that also sees puts — the one its weighted waiters share, opened
// if need be and closed two seconds after its last user left — and
// returns once etcd has created that watch. Every put or deletion under
// the prefix signals the subscriptions: a grant, a queued waiter (a
// spurious wake-up: the holders are the same), a release, an expiry
// (etcd deletes the keys of an expired lease, and the watch sees it), a
// downgrade, a new value. The Client then reads the holders with Inspect.
// Nothing is written for a watcher: a grant costs the same requests
// watched or not, and etcd sends the events. A watch survives a dropped
// connection (the etcd client resumes it at the revision where it
// stopped, so no event is lost), but while it is down the holders cannot
// be read, so Wait returns an error matching [dlock.ErrBackendUnavailable]
// as soon as the gRPC connection leaves the Ready state: the Client
// reports it, reads the holders until it can again, and so reports what
// changed meanwhile. A watch that etcd ends (the member lost its leader,
// the history was compacted past it, the backend closed) also ends Wait
// with an error, and the Client subscribes again.
package etcd

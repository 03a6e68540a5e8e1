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
// round trip, and a release one compare-and-delete. A waiter waits for the
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
package etcd

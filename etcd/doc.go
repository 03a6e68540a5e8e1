// Package etcd is a dlock backend on etcd v3 (go.etcd.io/etcd/client/v3):
// one key per acquisition under the lock's prefix, on an etcd lease that
// the backend's holds of one TTL share, granted in create-revision order,
// with the key's create revision as the fencing token.
//
// [Open] dials a client of its own from a comma list of endpoints; [New]
// uses a *clientv3.Client the caller owns; the "etcd" URL scheme is
// [ParseURL] then Open.
//
// # Guarantees
//
// Exclusion rests on etcd's quorum: writes and linearizable reads go
// through a majority of the members, so at most one key is the lowest under
// a lock's prefix, and it stays so until it is deleted or its lease
// expires; lease expiry is decided by the leader's clock alone. A hold is
// valid until the send time of its last successful keep-alive plus
// TTL × (1 − drift), a moment before etcd can expire it. Grants are in
// arrival order (fair whether or not [dlock.Fair] is asked for).
//
// Lease TTLs are whole seconds: a TTL is rounded up (the longest is
// [dlock.MaxTTL]), and etcd raises one below its minimum (1.5 × the
// election timeout) to that minimum. The rounding only delays the release
// of an abandoned lock; it never shortens a hold.
//
// The fencing token is the key's create revision, which strictly increases
// with every write to the cluster and survives restarts: a resource that
// rejects tokens lower than one it has seen turns the write of a paused or
// cut-off holder into an error. A key at the head of a queue that dlock did
// not write fails TryLock and Lock with [dlock.ErrForeignData].
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
// An acquisition puts PREFIX/ESC(NAME)/LEASEID-N, holding the owner and a
// hold count, in one transaction that also reads the holder (the key with
// the lowest create revision) and the key's predecessor. The key is on
// the backend's shared lease for the TTL asked for (one per backend and
// TTL, granted at first use, like an etcd Session's), and N numbers the
// backend's live keys, so every acquisition has a key of its own. A key
// that a release deleted is used again by the backend's next acquisition
// of the name (with a new create revision, so tokens still increase):
// etcd keeps an index entry for every deleted key until its history is
// compacted, and each read of a lock's prefix walks them all. A
// keep-alive sent with the transaction confirms the lease, unless a
// request of the backend confirmed it within the last eighth of its TTL:
// then the grant counts from that confirmation. Uncontended, an
// acquisition is one round trip and one write, a release one
// compare-and-delete (of a key not modified since its creation at the
// token), and holding many locks costs, per renewal period, one keep-alive
// per renewal call (the Client renews up to 1,024 holds a call) and about
// two listings of the keys on the shared lease, whatever the number of
// holds (see below).
//
// A waiter waits for the deletion of its immediate predecessor only, so a
// release wakes one waiter. The deletions come from long-lived watches,
// shared by the backend's waiters and kept 2 s after the last one left:
// a wait costs etcd no request, and no hand-off waits for etcd's catch-up
// loop, which serves every 100 ms a watch that was not current when it
// was registered (with a watch per wait, that happened whenever a write
// landed during the registration). A waiter with at most 8 keys before
// its own watches the lock's prefix; one further back watches its
// predecessor's key only, so that a release in a long queue of many
// clients is not sent to every client (the backend's keys are used again,
// so a queue that cycles keeps its watches). A watch remembers recent
// deletions for a waiter that subscribes after its predecessor's was
// dispatched; when it cannot tell, the waiter reads its predecessor. The
// enqueue also reads the keys before the waiter's (up to 8, keys only);
// keys join a queue only at its end, so once the watch of the prefix has
// seen all of them deleted, and not the waiter's own, the waiter's key is
// the lowest, and a shared lease confirmed within the last eighth of its
// TTL grants it with no request at all: a contended hand-off costs one
// enqueue and one release. Otherwise a waiter is granted only by a
// transaction that finds its own key first while its lease is known to
// live a full TTL from the attempt (or from the confirmation the grant
// counts from), so a waiter whose lease expired while it waited (etcd
// issue 11456) gets [dlock.ErrLeaseLost], never the lock.
//
// A key per acquisition, rather than one per Client and name (an etcd
// Session's concurrency.Mutex), lets two goroutines that share a Client
// exclude each other (unlike concurrency.Mutex, etcd issues 10756 and
// 11360), and every renewal checks each hold's own key, so a hold whose key
// was deleted learns of its loss alone; an expired shared lease ends every
// hold of the backend with that TTL. Reentrancy happens only when the
// request's owner equals the owner stored in the holder's key: the count in
// the key is raised and the holder's token returned.
//
// Requests that fail because etcd has no leader or cannot be reached are
// retried for up to 10 s, each bounded by half the TTL; a grant answered
// more than half a TTL after the request is confirmed by a fresh attempt
// (Lock) or given back (TryLock). A renewal is a keep-alive of the hold's
// lease and a read of its key; holds due at once are renewed together
// ([Backend.RenewBatch]: one keep-alive per lease, their keys read 100 to
// a transaction); a longer TTL moves the key onto a lease of its own. When
// a call renews more than 100 holds on a shared lease, one request for
// the keys etcd has attached to that lease stands for their reads, and
// the calls of a renewal period share it: a listing serves a hold if it
// was requested after the hold's key was last found there and at most a
// sixth of the TTL ago. So every renewal looks at each key anew, and a key
// deleted by someone else is found gone at the first renewal that comes a
// sixth of the TTL after the deletion, the second at the latest. The
// listing is kept as 64-bit hashes of the keys (8 bytes a hold); a deleted
// key whose hash equals another's on the lease would go unnoticed, a
// chance of about n/2⁶⁴ among n holds.
package etcd

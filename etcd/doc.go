// Package etcd is a dlock backend on etcd v3 (go.etcd.io/etcd/client/v3):
// one key per acquisition under the lock's prefix, bound to an etcd lease,
// granted in create-revision order, with the key's create revision as the
// fencing token.
//
// Import it for the "etcd" URL scheme:
//
//	etcd://host1:2379,host2:2379/prefix?connect_timeout=5s
//
// lists the cluster's client endpoints (plain http; user:password@ for etcd
// authentication) and the key prefix ("dlock" when the path is empty).
// connect_timeout (or dial-timeout, etcdctl's name) bounds Open and each
// dial (default [dlock.DefaultConnectTimeout]).
// [New] takes an existing *clientv3.Client instead.
//
// # Maximum TTL
//
// A TTL becomes an etcd lease of whole seconds (rounded up, without
// overflow). The longest TTL is [dlock.MaxTTL] (24 h), the Client's
// ceiling: far below etcd's own limit on lease TTLs.
//
// # Algorithm
//
// The lock called NAME lives under PREFIX/ESC(NAME)/, where ESC escapes "%"
// and "/" so that no lock's prefix is a prefix of another's. An acquisition
// takes an etcd lease of the requested TTL that no other acquisition uses
// and puts the key PREFIX/ESC(NAME)/LEASEID, attached to that lease,
// holding the owner and a hold count, in one transaction that also reads
// the current holder and the key's predecessor. The holder is the key with
// the lowest create revision. A waiter watches only its immediate
// predecessor (the key with the highest create revision below its own) for
// deletion, so a release wakes one waiter, not all. The watch starts at the
// current revision (etcd serves a watch that starts in the past from a loop
// that catches up every 100ms); if anything was written since the waiter
// saw its predecessor, a read once the watch is in place checks that the
// predecessor is still there, so no deletion is missed. Grants are
// therefore in arrival order: the backend is fair whether or not
// [dlock.Fair] is asked for.
//
// The lease is a fresh grant, or a spare: the lease of an earlier hold of
// this backend whose key was deleted by its release (a lease without keys,
// kept for reuse instead of being revoked). A spare is confirmed by a
// keep-alive sent together with the transaction; etcd answers a keep-alive
// without a raft round, so an uncontended acquisition costs one round trip
// and one write (the transaction), and a release one write (a
// compare-and-delete). All keep-alives of a backend go over one long-lived
// stream.
//
// A waiter is granted only by a transaction that finds, at one revision,
// its own key still there with its own create revision and no older key,
// together with a keep-alive of its lease sent after the attempt began. A
// waiter whose lease expired while it waited (a paused process, etcd issue
// 11456) is never told that it holds the lock: it gets an error matching
// [dlock.ErrLeaseLost] that says so.
//
// Every acquisition has its own lease and its own key, so two goroutines of
// one process that lock the same name through one Client exclude each
// other (unlike concurrency.Mutex on a shared Session, etcd issues 10756 and
// 11360). Reentrancy happens only when the request's owner equals the owner
// stored in the holder's key (an explicit [dlock.Owner] or a context
// carrying the outer lease): the hold count in the key is incremented and
// the holder's token returned, so another process with the same owner can
// re-enter too.
//
// A lease per hold rather than one per Client (an etcd Session) is what
// makes loss exact: a hold is lost when its own lease or its own key is
// gone, and a lost hold takes no other hold with it; holds may have
// different TTLs and be extended one by one; and the Client's validity
// deadline, counted from the request's send time, is backed by a grant or
// keep-alive of that very lease sent after it, while a shared lease's
// expiry depends on when anyone last renewed it. Spares keep the cost of
// that choice to a keep-alive per acquisition.
//
// # Failures
//
// Requests that fail because etcd has no leader or cannot be reached are
// retried for up to 10 s by an acquisition, each request bounded by half
// the TTL (a request to a leader that just died can otherwise hang for
// etcd's request timeout). A grant answered more than half a TTL after the
// request is confirmed by a fresh attempt (Lock) or given back (TryLock),
// so that the Client, which counts the lease from the request, never hands
// out a lease that is already spent. A waiter that cannot reach etcd keeps
// waiting, and keeps trying to keep its lease alive, until its context
// ends. Renewal errors other than loss are retried by the Client until the
// lease's deadline.
//
// A key at the head of a lock's queue that dlock did not write — a value
// that is not dlock's JSON with an owner and holds of at least 1, or a key
// without a lease, which would hold the lock for ever — makes TryLock and
// Lock fail with dlock.ErrForeignData naming the key; the request's own
// key goes with its lease, so nothing is left changed. Inspect lists such
// a lock with LockInfo.Bad set.
//
// # Leases and time
//
// etcd lease TTLs are whole seconds, and the server raises a TTL below its
// minimum (1.5 × the election timeout, 2 s with the defaults) to that
// minimum. The backend asks for the requested TTL rounded up to whole
// seconds, so a TTL of 100ms holds the key for 1-2 s after a crash (and is
// renewed every 33ms by the Client, as any 100ms lease). The
// Client computes the lease's validity from the requested TTL, which is
// never longer than etcd's, so the rounding only delays the release of an
// abandoned lock; it never shortens a hold. A renewal is a keep-alive of
// the hold's lease (sent after the renewal began, so etcd keeps the key
// until at least that moment plus the TTL) and a read of the key: a lease
// that etcd no longer knows, or a key that is gone or no longer the
// holder's, is reported as [dlock.ErrLeaseLost]. Extending a hold to a
// longer TTL moves its key onto a new lease with that TTL in one
// compare-and-put; a shorter TTL keeps the longer lease. Many holds due at
// once are renewed with one keep-alive stream and one read transaction
// ([Backend.RenewBatch]).
//
// # What the guarantee rests on
//
// Exclusion rests on etcd itself: every write and every linearizable read
// goes through a quorum of the cluster's members, so the order of create
// revisions and the existence of keys are agreed on by a majority, and a
// lease's expiry is decided by the leader's clock alone (a new leader
// restarts every lease at its full TTL, which only lengthens holds). While
// a quorum is reachable, at most one key is the lowest under a lock's
// prefix, and it stays there until it is deleted or its lease expires. The
// client side adds a bound in time: a lease is valid until the send time of
// its last successful keep-alive plus TTL × (1 − drift), a moment before
// etcd can expire it.
//
// No lock service can stop a holder that was paused, or cut off from etcd,
// from acting after its lease ended. The fencing token closes that gap: it
// is the key's create revision, an etcd revision that strictly increases
// with every grant of the name (indeed with every write to the cluster),
// survives restarts and never goes back. A resource that remembers the
// highest token it has seen and rejects lower ones turns a late holder's
// write into an error instead of a lost update.
package etcd

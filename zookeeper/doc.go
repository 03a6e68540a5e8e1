// Package zookeeper is a dlock backend on an Apache ZooKeeper ensemble,
// over github.com/go-zookeeper/zk: the lock recipe of the ZooKeeper
// documentation and of Curator's InterProcessMutex, with the czxid of the
// lock node as the fencing token.
//
// [Open] connects a session of its own from a comma list of servers; [New]
// uses a *zk.Conn the caller owns; the "zk" (and "zookeeper") URL scheme is
// [ParseURL] then Open.
//
// # Guarantees
//
// Exclusion rests on ZooKeeper's quorum: writes are ordered by the leader
// and committed on a majority. A hold lasts as long as its node, and the
// node as long as the backend's session, which the servers end when they
// have not heard from it for the session timeout. That timeout therefore
// bounds the TTL: the backend is a [dlock.TTLLimiter] whose maximum is the
// session timeout the servers granted ([SessionTimeout]). A shorter TTL is
// enforced by the backend while the process lives; a holder that dies,
// freezes or is cut off keeps its node until the session expires, so the
// session timeout, not a shorter TTL, bounds how long a dead holder blocks
// a lock. The backend has one session for all its locks, and ZooKeeper
// fixes a session's timeout when it is made, so it cannot follow each
// lock's TTL: give [SessionTimeout] (session_timeout) the TTL you use to
// make the two agree. Grants are in queue
// order (fair whatever [dlock.Fair] says).
//
// A lost connection starts a clock from the send time of the latest
// request the servers answered; when the session timeout has passed, every
// hold of the session is lost ([dlock.ErrLeaseLost]) without waiting to be
// told that the session expired. A reconnection within that time keeps
// the holds ([LossOnSessionEnd], the default); [LossOnDisconnect] ends
// them at the first disconnect (Curator's "SUSPENDED is lost").
//
// One attempt (TryLock, the first attempt of Lock, and each look of a
// waiting Lock) is bounded by the request timeout, the session timeout
// but at most 10 s, whatever its context allows: a server that hangs
// while keeping the connection open (paused, overloaded) fails the
// attempt with [dlock.ErrBackendUnavailable] then, as etcd's and Redis's
// request timeouts do, instead of blocking as long as the server hangs.
//
// The fencing token is the node's czxid: zxids strictly increase over the
// life of the ensemble, so a resource that rejects tokens lower than one it
// has seen turns the write of a paused holder into an error. A node at the
// head of a queue that dlock did not write fails TryLock and Lock with
// [dlock.ErrForeignData].
//
// # URL
//
//	zk://host1:2181,host2:2181,host3:2181/chroot?session_timeout=30s&loss=session&connect_timeout=10s
//
// The path is the [Root] (default [DefaultRoot]); see [ParseURL] for the
// parameters.
//
// # How it works
//
// Every lock name is a container node under the root, which the servers
// delete once it is empty. An acquisition creates an EPHEMERAL_SEQUENTIAL
// child carrying {"owner", "count"}, in one multi with a setData on the
// container whose answer carries the child's czxid and the container's
// count of children; the first child in sequence order holds the lock.
// Children are named like Curator's protected nodes (a random id), so that
// after a connection loss the backend finds its node again instead of
// leaving an orphan. When the count says the new child is the only one,
// it is first: an uncontended acquisition costs that one request, and a
// release one (a delete conditional on the data version). Otherwise a
// children read finds the node's place in the queue.
//
// A waiter watches its immediate predecessor and the node before that: a
// deletion wakes at most two waiters, never the whole queue. When the
// predecessor is the holder (nothing else ahead), its deletion alone
// grants the waiter, since no node is ever queued ahead of an existing
// one. The deletion of the node before the predecessor usually means
// that the predecessor was granted: the waiter reads the queue then,
// while the predecessor holds the lock, so that the hand-off to it needs
// no read after the release.
//
// A request whose owner equals the holder's re-enters: it raises the count
// with a conditional setData, withdraws its own child and gets the
// holder's token. A renewal reads the child's stat: it must exist, have
// the hold's czxid and belong to the current session. A backend holding
// many leases (256) sets one persistent recursive watch on its root
// (ZooKeeper 3.6's addWatch, sent on the backend's own connection by
// Open; a Backend made by New cannot) and then renews them all with one
// request per batch: the watch reports a deleted child at once, and its
// lease is lost (see [Backend.RenewBatch]). The watch brings the backend
// a notification for every change under the root while its connection
// lasts; with fewer holds, each renewal reads its child.
//
// # Semaphores and read-write locks
//
// The backend grants every [dlock.Kind] ([Backend.CanGrant] says yes to
// all, up to [dlock.MaxLimit]) over the same queue: a request of a
// semaphore, a read-write lock or an election is an EPHEMERAL_SEQUENTIAL
// child whose data adds its kind, limit and weight (and an election's
// value) to the owner and count, {"owner","count","kind","limit","weight"}.
// A mutex's request is exactly as above and never reaches this code.
//
// The grant rule is strict FIFO, as golang.org/x/sync's semaphore.Weighted:
// a child is granted when the sum of the weights of every child up to and
// including it is at most the limit. Weights are positive, so the holders
// are always a prefix of the sequence order, a waiting writer keeps every
// later reader out, and a child once granted stays granted (nothing is
// ever queued ahead of it; weights only go down). A request reads the
// children ahead of its node (in parallel, and once: what it read stays
// true or errs on the side of waiting) and decides alone, in one listing;
// no write is needed to grant. The kind and limit are the head child's: a
// request that disagrees with the head gets a [dlock.ConflictError] and
// its child is deleted before the call returns (a disagreeing child that
// is still on its way out counts as the whole limit for those behind it,
// so it can only delay them). A child whose data dlock did not write, or
// whose shape is impossible (a weight above its limit, a count below 1),
// fails the acquisition with [dlock.ErrForeignData]. Re-entry by the
// owner of a holder raises that holder's count with a conditional write
// and keeps its token; asking more weight than it holds is
// [dlock.ErrUpgrade]. The token is the child's czxid: zxids increase
// across every kind, so a writer's token is above every earlier grant's.
//
// Watching only the predecessor no longer suffices above a limit of 1: a
// waiter may be let in by the release of any holder ahead, while its
// predecessor waits on. Watching the first child or the container would
// wake every waiter at every change (a herd). Instead each waiter watches
// one thing that must change before it can be granted:
//
//   - a waiter whose nearest child ahead waits too cannot be granted before
//     that child: it watches that child alone (its deletion, or a write of
//     its data). A waiter that is granted with children behind it rewrites
//     its own data once (same bytes, at version 0), which wakes the next
//     waiter; so every waiter that now fits is woken in turn, and only
//     those;
//   - the first waiter (every child ahead holds) watches the fewest holders,
//     heaviest first, whose weight alone keeps it out — one for a writer, the
//     writer for a reader — so it is woken when one of them is released,
//     expires with its session, or is downgraded, and by nothing else.
//
// A waiter that gives up deletes its child, which wakes the waiter behind
// it. Downgrade rewrites the hold's data with the lower weight, conditional
// on the version it read (no other writer can come in between: the hold
// never leaves the prefix); the first waiter's watch on it fires.
// Renewal, release, loss and clean-up are the mutex's, per child; the
// container is deleted by the servers once its last child is gone, so
// nothing is left of a name after its last permit is released.
//
// # Elections and watching
//
// An election is the queue with a limit of 1 whose children carry the
// candidates' values; [Backend.Proclaim] rewrites the leader's child with
// a version check. [Backend.Watch] follows a name with ZooKeeper's own
// watches: a children watch on the container (grants by creation,
// releases, expired sessions) and a data watch on each child (values,
// counts, downgrades, and the write of a waiter granted by a release),
// set again before each Wait returns; [Backend.Inspect] lists one row per
// holder with its kind, limit, weight and value.
package zookeeper

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
// the hold's czxid and belong to the current session.
package zookeeper

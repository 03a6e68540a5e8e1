// Package zookeeper is a dlock backend on an Apache ZooKeeper ensemble,
// over github.com/go-zookeeper/zk. It is the lock recipe of the ZooKeeper
// documentation and of Curator's InterProcessMutex, with what that recipe
// leaves to its user made part of the backend.
//
// Import it for the "zk" (and "zookeeper") URL scheme:
//
//	zk://host1:2181,host2:2181,host3:2181/chroot?session_timeout=30s&loss=session&connect_timeout=10s
//
// The path is the root under which the locks live (default "/dlock"); see
// [ParseURL] for the parameters. [Connect] and [New] build a backend in
// code.
//
// # The recipe
//
// Every lock name is a container node under the root (the name escaped into
// one path component), which the servers delete once it is empty, so
// names used once leave nothing behind. Every acquisition creates an
// EPHEMERAL_SEQUENTIAL child of it that carries the owner; the child
// first in sequence order holds the lock. A request that is not first
// watches only its immediate predecessor, so a release (or a departure)
// wakes exactly one waiter and never a herd; and the queue makes the lock
// fair by construction, whatever [dlock.Fair] says. A request that gives up
// deletes its child, and the one behind it moves on to watch the one before.
//
// The child is created together with a setData on the container, in one
// multi: the answer then carries the transaction's zxid, which is the
// child's creation zxid (czxid). The child is named like Curator's
// protected nodes ("_c_" + a random id + "-lock-" + sequence), so that when
// the connection is lost before the answer arrives, the backend finds its
// node again by the id after reconnecting, instead of leaving an orphan
// that would block the lock or creating a second one.
//
// Uncontended, an acquisition costs two requests (the multi and one
// children read) and a release one (a delete conditional on the node's
// data version, which proves nobody re-entered).
//
// # Fencing tokens
//
// The token of a grant is the czxid of its child. Zxids strictly increase
// over the whole life of the ensemble (across leader elections, whose new
// epoch is in the high bits), so a later grant always has a larger token,
// even after the container was reaped and the sequence numbers started
// again at zero (which is why the sequence number is not the token).
//
// # Foreign nodes
//
// A lock child at the head of a queue that dlock did not write — content
// that is not dlock's JSON with an owner and a count of at least 1, or a
// node that is not ephemeral and so would hold the lock for ever — makes
// TryLock and Lock fail with [dlock.ErrForeignData] naming the node; the
// request's own node is withdrawn, so nothing is left changed. Inspect
// lists such a lock with LockInfo.Bad set. Delete the node to free the
// lock.
//
// # Reentrancy
//
// The holder's child stores {"owner": ..., "count": n}. A request whose
// owner equals the holder's re-enters: it raises the count with a setData
// conditional on the data version, withdraws its own child, and gets the
// holder's token. Because the count is in ZooKeeper, another process using
// the same explicit owner re-enters too; a release lowers the count and
// deletes the child at zero. A reentrant hold taken through another
// backend's session lives on that session's node: it is checked at every
// renewal, but it can only be as sure as the session that holds the node.
//
// # What the guarantee rests on
//
// Exclusion rests on ZooKeeper's quorum: writes are ordered by the leader
// and committed on a majority, and a node is seen by every later request
// of any client. A hold lasts as long as its child, and the child as long
// as the session of the backend that created it; the servers end a session
// when they have not heard from it for the session timeout, and that is
// judged on the servers' clocks. A majority of the ensemble must be up for
// anything to happen; a minority partition neither grants nor expires.
//
// The session timeout bounds the TTL: ZooKeeper may delete a session's
// nodes one session timeout after it last heard from the client, so the
// backend refuses a TTL (or an Extend) above the session timeout the
// servers granted ([SessionTimeout], default 30 s, clamped by the servers'
// min/maxSessionTimeout) with [dlock.ErrInvalidOption]: the backend is a
// [dlock.TTLLimiter] whose maximum TTL is the session timeout (the Client
// checks it before a request is sent). A shorter TTL is
// enforced by the backend while the process lives (a hold its lease stopped
// renewing for a TTL is released); if the process dies, its locks are
// freed when its session expires, one session timeout later (at once when
// the process closes its session on the way out).
//
// Every renewal reads the child's stat: the child must exist, have the
// hold's czxid, and belong to the current session (ephemeralOwner). The
// answer proves that the session was alive when the request was sent,
// which is what the dlock Client's lease deadline (send time + TTL) needs.
//
// # Session loss
//
// A lost connection starts a clock. The backend watches every request and
// answer of its connection, pings included, and knows the send time of the
// latest request the servers answered. When the session timeout has passed
// since then without an answer, the session may be gone, and every hold on
// it is lost (its next renewal returns [dlock.ErrLeaseLost]): the backend
// does not wait for a reconnection to be told that the session expired,
// which ZooKeeper only says once the client reaches a server again. When
// the client reconnects within that time to any server of the ensemble,
// the session, its nodes and its holds go on, with the same tokens; the
// first renewal after the reconnection checks that the child is still
// there and still the session's.
//
// That is the default policy, [LossOnSessionEnd] (Curator's
// SessionConnectionStateErrorPolicy). [LossOnDisconnect] (the URL's
// loss=disconnect; Curator's Standard policy, where SUSPENDED counts as
// lost) ends the holds at the first disconnect instead. Either way, the
// node of a hold that was declared lost while its session lived on is
// deleted as soon as the session is connected again.
//
// # What the fencing token adds
//
// No lock service can stop a paused process (a long GC, a stopped VM) from
// acting after its session expired and another client got the lock; the
// lease deadline makes such a process notice at its next check, not
// before. Give the token to the resource the lock protects and let the
// resource reject a write that carries a token lower than one it has seen:
// the czxid order makes that check sound.
package zookeeper

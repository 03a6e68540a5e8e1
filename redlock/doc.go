// Package redlock is a dlock backend on N independent Redis masters, the
// Redlock algorithm done so that its assumptions are visible.
//
// Make it with [New] on one go-redis client per master that the caller
// owns, or with [Open] on a comma list of masters (Redis 6.2 or later:
// the scripts use SET … GET). The details of
// everything below are in docs/backends/redlock.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/redlock.md.
//
// # URL
//
// See [ParseURL] for the forms:
//
//	c, err := dlock.Open(ctx, "redlock://h1:6379,h2:6379,h3:6379,h4:6379,h5:6379")
//
// # Guarantees
//
//   - A grant counts only when N/2+1 masters granted and the validity
//     TTL − elapsed − (TTL × DriftFactor + 2ms) is still positive; the
//     longest TTL is [dlock.MaxTTL] (24 h).
//   - Fencing tokens strictly increase: a master grants only above its
//     fence (the last token written there, kept when the lock frees), and
//     any two majorities share a master. The clock only decides how many
//     rounds a grant takes, never whether tokens increase.
//   - A renewal that finds a quorum no longer holding the lock reports it
//     lost ([dlock.ErrLeaseLost]); one that missed a quorum only for
//     masters that did not answer keeps the hold until its deadline.
//   - No hold is left behind on a minority: give-backs and releases that
//     fail to reach a master are retried until they do or what they undo
//     has expired there.
//
// # Assumptions, and what breaks when they fail
//
// Exclusion and increasing tokens rest on any two quorums sharing a master
// that remembers the earlier grant while the earlier holder believes it
// holds. That needs bounded clock drift (a forward step of enough masters'
// clocks grants the lock to a second owner; tokens still increase), the
// delayed-restart rule (a master that lost its data stays out for longer
// than the largest TTL in use), pauses shorter than the validity, and
// network delay within the node timeout. Redlock's tokens are as strong as
// these assumptions; for a lock whose safety must not depend on timing,
// use a consensus store (the zookeeper and etcd backends).
//
// # How many masters
//
// Use three or more independent masters, ideally five: a grant needs
// N/2+1 of them, so three tolerate one master down, five tolerate two.
// One or two masters are allowed (a test set-up, a migration from the
// redis backend) but grant only while every master answers, and Open and
// New then log a warning on the backend's Logger, when one is given (the Client's logger,
// dlock.WithLogger, does not reach a backend, which is made before it).
// A master listed twice, after normalising its address (default port
// 6379, localhost as 127.0.0.1), is refused with [dlock.ErrInvalidOption]:
// it would vote twice. Other names of one server (a second host name, an
// address of another interface) are not found, so list each master once.
//
// # Semaphores and read-write locks
//
// Refused (see [Backend.CanGrant]), with an error matching
// dlock.ErrInvalidOption. A grant counts only when a majority of masters
// made it, and any two majorities share a master — which bounds a count of
// 1 and no more: with 3 masters and a limit of 2, permits granted by
// masters {1,2}, {2,3} and {1,3} put 3 permits out while every master
// counts 2. A quorum of all masters would bound it but loses the
// availability Redlock is for, so a semaphore or read-write lock needs a
// single Redis (redis://, Sentinel or Cluster) or another store.
//
// # Elections and watching
//
// Refused (see [Backend.CanGrant]): a Redlock could bound one leader
// (limit 1, as it does the mutex), but an election is also the leader's
// published value and a watch of it, and neither fits Redlock as it
// stands. The value must be the one a majority of masters holds, so
// Leader and Observe need a majority read, which the backend does not
// have (it lists no holders: no dlock.Inspector). Proclaim must change
// the value on a majority while the lease holds there; one that reaches
// only a minority before failing leaves the masters disagreeing, and a
// reader could tell the newer value only by a version compared across
// masters, which the scripts do not keep. Following changes would need a
// subscription per master and a majority read after each notice. For
// elections use a single Redis (redis://, Sentinel or Cluster), or
// ZooKeeper or etcd when leadership must not depend on timing. For the
// same reason Client.Watch, which needs a holder listing, is refused.
//
// # How it works
//
// Acquire sends one script to every master in parallel, each call bounded
// by [NodeTimeout] (250ms by default), and returns as soon as a quorum
// granted; late answers are dealt with in the background, each attempt
// undoing only its own grants. A failed attempt gives back at once on
// every master it reached and fails with [dlock.ErrNotAcquired] (a
// [*dlock.HeldError]), a [*QuorumError] (matching [dlock.ErrNoQuorum] and
// [dlock.ErrBackendUnavailable]), or [dlock.ErrForeignData] for data dlock
// did not write. The Client renews all due leases in one script call per
// master ([dlock.BatchRenewer]). Reentrancy is by explicit owner, counted
// on each master. Waiters hear release notices over one pub/sub connection
// per master and queue on every master by arrival ticket, so a notice
// names one waiter; [dlock.Fair] waiters get the lock in queue order.
// A release of a lock that a [dlock.Fair] waiter of the same process
// (of any Backend on the same masters) waits for sends that waiter's next
// attempt along, in the same round trip to each master, right after the
// release: the masters decide it as any attempt, by their queues' order.
// Fairness across processes follows their clocks; exclusion and tokens do
// not. Per lock, a master keeps one hash expiring with the lease and, while
// waiters queue, two queues; per Cluster slot, a fence key that is never
// deleted.
package redlock

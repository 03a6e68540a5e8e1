// Package redlock is a dlock backend on N independent Redis masters, the
// Redlock algorithm done so that its assumptions are visible.
//
// Make it with [New] on one go-redis client per master that the caller
// owns, with [Open] on a comma list of masters, or by URL (see [ParseURL]):
//
//	c, err := dlock.Open(ctx, "redlock://h1:6379,h2:6379,h3:6379,h4:6379,h5:6379")
//
// # Maximum TTL
//
// A TTL is sent to every master as whole milliseconds (rounded up, without
// overflow) and the validity is TTL − elapsed − drift. The longest TTL is
// [dlock.MaxTTL] (24 h), the Client's ceiling.
//
// # The algorithm
//
// Acquire sends one script to every master in parallel, each call bounded
// by [NodeTimeout] (much smaller than the TTL; 250ms by default). It
// returns as soon as N/2+1 masters granted, without waiting for slow ones.
// Their late answers are dealt with in the background: a late grant of a
// failed attempt is given back, a late grant of a successful one keeps its
// token, and a late grant of a hold that was released meanwhile is given
// back. Every attempt has an acquisition id of its own, stored with its
// grants, and releases match that id (or the token): the undoing of one
// attempt never touches another's grant, even when a fair waiter's
// attempts follow each other under one owner. A grant needs a quorum of
// new grants or a quorum of reentries: a master where the same owner still
// holds otherwise (its previous hold being released there) answers with a
// reentry, which is undone and does not count.
//
// Fencing tokens: the request proposes a token (this process's clock in
// µs), and a master grants only if its fence — the last token written
// there, kept when the lock frees — is below the proposal, storing the
// proposal as its fence in the same atomic step. So the token is written to
// the granting majority before the grant counts, and it is above every
// fence of that majority; any two majorities share a master, so every new
// grant's token is above every earlier grant's. A master whose fence is
// not below the proposal refuses and reports its fence; the next round
// (at most three) proposes above the highest fence seen. The clock only
// decides how many rounds a grant takes (one when the clients' clocks
// roughly agree), never whether tokens increase. A reentrant grant (the
// owner holds a majority) returns the holder's token.
//
// The grant counts only when a quorum granted and the validity
//
//	TTL − elapsed − (TTL × DriftFactor + 2ms)
//
// is still positive, elapsed measured on the monotonic clock from before
// the first send. A Backend bounds the attempts under way at once (the
// others wait their turn, before their clock starts; the bound, at most
// 64, halves when a master answered an attempt too late and grows by one
// with each attempt answered in time), and a call
// queued in this process behind others to the same master is not timed
// out for that wait: the node timeout bounds the master's answer. A
// waiting Lock whose round missed a quorum only for masters that did not
// answer within the node timeout makes another round, up to three. Otherwise, and whenever no quorum granted, the attempt
// gives back at once, on every master it reached, whatever it may have got
// there, and fails: with [dlock.ErrNotAcquired]
// (a [*dlock.HeldError] naming the holder of most masters) when other
// holders refused, with a [*QuorumError] matching [dlock.ErrNoQuorum] and
// [dlock.ErrBackendUnavailable], naming each failed master and why, when
// too many masters failed to answer for a quorum to be possible. A master
// whose hash for the lock holds data dlock did not write (a field that is
// not a number, a count below 1, a fence at [MaxToken], above which Lua's
// doubles are not exact) refuses before any write; an attempt that fails
// while one did so fails with [dlock.ErrForeignData] naming the key and the
// master, as waiting would not help (a quorum of other masters still
// grants).
//
// A renewal extends the hold on every master and succeeds only when a
// quorum did so with validity left. When the masters that answered rule a
// quorum out (they do not hold it), the hold is lost
// ([dlock.ErrLeaseLost]), which the Client reports through the lease's
// Done and Err. When a quorum was missed only for masters that did not
// answer in time, the renewal fails with a [*QuorumError] and the hold is
// kept: the lease stays valid until its deadline (counted from the last
// renewal a quorum made, so the masters that did not answer still hold
// it until then), and the Client renews it again meanwhile. A master where
// the lock is free and whose fence is not above the holder's token (it
// answered the acquisition too late, restarted empty, or let its copy
// expire) takes the hold again on renewal, so that a hold granted by a bare
// quorum spreads to the other masters and survives losing one of them. A
// renewal that loses the hold releases what is left of it in the
// background (for a pass that lost many, one goroutine per master sends
// the releases as pipelines).
// The Client renews all the leases that are due together
// ([dlock.BatchRenewer]): one script call per master for up to 1,024
// holds, sent to the masters in parallel, each at once on a connection of
// its own; it returns as soon as every hold has a quorum of renewals (or
// every master answered, or a third of the shortest TTL passed, at least
// the node timeout: validity counts from before the send, and a call for
// a thousand holds is far more work than an acquisition) and judges each
// hold as above.
// Release gives up the hold on all masters and returns as soon as a quorum
// released (or, short of that, when all answered: it succeeds when the
// masters that answered released, and reports ErrLeaseLost when a quorum
// no longer held it). The other masters are released in the background;
// Close waits for those calls.
//
// No hold is left behind on a minority to expire by its TTL. A master that
// does not answer (paused, slow, its link cut) may still execute a request
// sent to it, after the client gave up on it: every give-back and release
// that fails to reach a master is retried, by one goroutine per master,
// until it does or until whatever it undoes has expired there (Close stops
// the retries). A release raises the master's fence above the released
// token when it leaves the lock free there (a failed attempt's give-back:
// to the highest token it proposed), so an acquisition or renewal of that
// hold that reaches the master after its release is refused; one that
// reaches it before is undone by the release. The limit: a master paused
// for longer than the TTL that, on resuming, executes an acquisition
// queued before the pause, after the retries gave up, holds that lock until
// its TTL (only that master, so it keeps nobody out while a quorum of the
// others is free; exclusion and tokens are not affected).
//
// Reentrancy is by explicit owner, with the count kept on each master. A
// waiting Lock hears the release notices of every master (the waiters of a
// Backend share one pub/sub connection per master and one subscription
// per lock, which outlives them for a while) and retries once notices show
// enough free masters for a quorum (counting those that were free at its
// last attempt), at the latest when the holder's shortest remaining lease
// ends (and at least every 3 to 3.75 seconds, at random), and after a
// short random pause when
// contenders split the masters between them (it got masters, nobody got a
// quorum, and all gave back; under 0.3ms for a contender that got all but
// one of a quorum, 1-15ms for the others). A notice names one waiter, and
// only that waiter tries, so that a release is not followed by every
// waiter colliding on the masters. Waiters queue on every master by a
// ticket (their arrival time by their own clock), so the masters agree on
// the order and name the same waiter. Fair waiters queue in the fair
// queue: a free lock with a fair queue goes to its head only, and the
// notice names that head (the others keep their place with those
// attempts). Other waiters queue in a wait queue that decides
// nothing about grants: the notice names its head, and the release
// promises the lock to that waiter for the node timeout, so that a
// newcomer, which needs no notice, does not take it first; then anyone
// may take it (a waiter that died holds the lock up no longer than that,
// and one that gives up passes the promise on). Other waiters do not wait
// the promise out: the release after the promised waiter's hold names the
// next one, and if the promised waiter died, they learn that the lock is
// free at their next attempt. A waiter that makes no
// attempt for 5 seconds leaves the queues; and one that got the lock or
// gave up leaves them at once, even on a master that queued it again
// afterwards (an attempt's request that reached it late): the late answer
// takes it out, else that master would promise the lock to a waiter that
// never tries, and the others could split the rest. Fairness across processes thus
// follows their clocks; exclusion and tokens do not.
//
// The calls to each master go through a few worker goroutines of its own,
// which send all the calls waiting for that master as one pipeline: under
// load one write and one read carry many lock operations.
//
// Each master holds, per lock, the hash PREFIX:{NAME} with the holder, its
// reentry count, its acquisition id, the end of its lease by that master's
// clock, the waiter the free lock is promised to and until when, and the
// fence (the last token written there, or one above the last released
// token); and, while waiters queue, the two queues and their waiters'
// deadlines. Besides, each master keeps a fence key per Cluster slot of the
// names it saw, PREFIX:fence:{TAG} (at most 16384, never deleted), holding
// the highest token or release floor written there for any name of the
// slot.
//
// # State
//
// What a lock keeps on each master, and for how long:
//
//   - held: its hash, with a PEXPIREAT at the end of the lease by that
//     master's clock, moved on by renewals: a holder that dies leaves
//     nothing once its lease is over there;
//   - waited on: the queues (fair, and the queue of other waiters), which
//     expire a second after their last waiter's deadline (5 s after its
//     last attempt); the hash lasts while the free lock is promised to a
//     waiter (the node timeout);
//   - after release: nothing. A release (or a waiter's cancel) that leaves
//     the lock free and promised to nobody deletes its hash in the same
//     script, raising the slot's fence key to the hash's fence first.
//
// A name's fence on a master is its hash's while the hash exists, else its
// slot's fence key: a proposal for a name in use is checked against that
// name only, and one for a name whose hash is gone against every earlier
// token of its slot (a client whose clock is behind may then need another
// round). So deleting hashes never lets a name's token go back; the fence
// keys are the constant cost of that, one per slot.
//
// # Guarantees
//
// Each master judges expiry by its own wall clock (TIME, in the scripts).
// A forward step of one master's clock by more than a lease's remaining
// TTL makes every hold there look expired; on a minority of masters that
// changes nothing, but on enough masters that the holder no longer has a
// majority the lock is granted to a second owner while the first still
// believes it holds until its next renewal fails (within TTL/3, at the
// latest at [dlock.Lease.Deadline]). Tokens still increase, and a
// resource that checks them rejects the older holder's writes once it has
// seen the new token. The assumptions below say what else must hold.
//
// # Assumptions, and what breaks when they fail
//
// Exclusion and increasing tokens rest on any two quorums sharing a master
// that remembers the earlier grant for as long as the earlier holder
// believes it holds. That needs:
//
//   - Bounded clock drift. Each master judges expiry by its own clock and
//     the client judges validity by its own monotonic clock; their rates
//     must agree to within DriftFactor. If a master's clock jumps forward
//     (an NTP step, a manual change) it expires a hold early and may grant
//     it to a second client while the first still counts on its validity:
//     two holders. Tokens still increase, because the fence key keeps the
//     token when a hold expires; fence-checking resources reject the older
//     holder.
//   - The delayed-restart rule. A master that restarts without persistence
//     (or with fsync less often than every write) comes back empty and may
//     grant a lock that a holder still holds there; with enough such
//     masters the holder loses its majority and a second client gets one.
//     A master that lost its data must stay out for longer than the
//     largest TTL in use before it rejoins; then every hold it forgot has
//     ended anyway. With that rule, a minority of masters restarting empty
//     changes nothing: the holder keeps its majority (and its renewals
//     take the restarted masters back), and the fences of the other
//     masters keep tokens increasing. Break it and two holders are
//     possible (TestDelayedRestartRule shows it: the first learns of its
//     loss at its next renewal, within its validity), and a new token
//     could fall below an older one if the masters that remembered the
//     fence were the ones that restarted; only the clock-based proposal
//     keeps it above in practice.
//   - Pauses shorter than the validity. A client process paused (GC, SIGSTOP,
//     swapping) past its lease's deadline may act on a lock that expired
//     and was granted to another: the Client's lease reports the loss at
//     its next check (Err compares the monotonic clock with the deadline),
//     but work already under way is not stopped. Only fencing tokens
//     checked by the resource protect against that. A master paused past
//     the TTL expires nothing while paused and resumes with holds whose
//     time has run out by its clock, which it then treats as expired; the
//     others decide meanwhile, so a pause of a minority is harmless.
//   - Network delay within the node timeout. Time spent in flight counts
//     against validity; an acquisition slower than TTL − drift fails.
//
// Redlock's tokens are as strong as these assumptions; for a lock whose
// safety must not depend on timing, use a consensus store (the zookeeper
// and etcd backends).
package redlock

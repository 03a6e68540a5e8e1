// Package redis is a dlock backend on Redis: a single server, a master
// managed by Sentinel, or a Redis Cluster, through the go-redis v9 client
// (github.com/redis/go-redis/v9).
//
// Create a backend on a client you already have with [New] (the backend
// never closes it), or with [Open] on an address (it dials a client of its
// own). The details of everything below are in docs/backends/redis.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/redis.md.
//
// Importing this package (or redlock) silences go-redis's own log lines
// (its default prints them on stderr): the library never writes on its
// own. A program that wants them calls goredis.SetLogger in main.
//
// # URL
//
// Import the package for its URL schemes and use dlock.Open (see
// [ParseURL] for the forms):
//
//	redis://[USER:PASSWORD@]HOST:PORT[/DB]
//	rediss://...                                       TLS
//	redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]
//	redis+cluster://HOST:PORT[,HOST:PORT...]
//
// # Guarantees
//
//   - A lock is exclusive as long as the Redis node that holds it keeps its
//     data. Replication is asynchronous: a failover to a replica that
//     missed the latest grant, or a restart without persistence, can grant
//     the lock to a second owner. [WaitReplicas] narrows this window but
//     does not close it; for exclusion that survives failures use a quorum
//     store (ZooKeeper, etcd) or Redlock with its timing assumptions.
//   - Fencing tokens strictly increase per name: a fence key (one per
//     Cluster slot, never expiring) is raised in the same script as each
//     grant. By default a token is max(fence+1, server time in µs)
//     ([ClockTokens]), on every topology, so tokens keep increasing when a
//     failover (also one behind a single address, as managed services do
//     it) or a restart loses the last grants, as long as the servers'
//     clocks agree to better than the time between the lost grant and the
//     next. ClockTokens(false) (clock_tokens=false) trades that for a
//     cheaper grant, for a server that never fails over. Tokens are large
//     and not always consecutive.
//   - The redis and redlock schemes on the same server share a lock's keys
//     and its fence key, with the same rule (above the fence), so a name
//     used through both, one after the other, still gets increasing tokens.
//   - Expiry is judged by the server's clock: a forward step longer than a
//     lease's remaining TTL grants the lock to a second owner until the
//     first holder's next renewal fails; the token still tells them apart.
//     Keep the clock slewed, not stepped, and the eviction policy at
//     noeviction.
//   - The longest TTL is [dlock.MaxTTL] (24 h).
//
// # How it works
//
// Each operation is one Lua script (one round trip, atomic). A lock's
// state lives under one hash tag, PREFIX:{NAME}: a hash of owner, reentry
// count and token expiring with the lease, and with dlock.Fair a FIFO
// queue of waiters with deadlines ([WaiterTimeout]). Nothing outlives a
// release or an abandoned lock's expiry but the fence keys: there is no
// sweep. A blocked Lock waits for a pub/sub notice on one connection per
// Backend instead of polling, bounded by the holder's remaining lease; a
// release wakes one waiter per process, and hands a fair lock directly to
// a head waiting in the same process. The Client renews all its leases in
// one script call per tick ([Backend.RenewBatch]).
//
// # Semaphores and read-write locks
//
// The backend grants dlock.Semaphore and dlock.RWMutex (see [Backend.CanGrant]
// and [Backend.Downgrade]) on a single server, Sentinel and Cluster alike,
// with scripts of their own; a mutex never runs them. A weighted name's
// state is under its hash tag too: the lock's hash records the kind, the
// limit and the weight held; PREFIX:{NAME}:holders maps each holder's
// owner to its weight, reentry count, token and request id, and
// PREFIX:{NAME}:expiry scores each holder by its lease's end in the server's
// time; waiters queue in the Fair queue's list and timeouts, each entry
// carrying its weight. One script per operation applies the grant rule:
// the unexpired holders' weights plus the request fit in the limit, and
// the request heads the queue or the queue is empty — strict arrival
// order, so a waiting writer holds back every later reader. Holders whose
// lease ended are dropped by the next script that looks. A release, a
// cancelled waiter or a downgrade publishes the queue head's request id on
// the lock's channel if the head now fits, and a head that is granted does
// the same for the next, so each waiter that fits is woken and no other;
// an expiry publishes nothing, so the head's wait is bounded by the
// earliest holder's lease. A queued waiter renews its deadline while it
// waits ([WaiterTimeout]); one whose process died is dropped when it
// passes, and its successor woken.
//
// Every grant takes a token from the fence key the mutex uses, so tokens
// of a name increase across kinds. For a semaphore they order grants but
// cannot exclude: N holders may write at once, each with its own token,
// and a fence only rejects writes older than the newest it has seen. A
// writer's token is above every earlier grant's, reader or writer, so a
// fence does reject a reader or writer that a later writer superseded.
//
// The state is recorded with the first grant and kept while the name has
// holders or waiters: every key expires with the last holder's lease or
// the queue, and a release or cancel that leaves nothing deletes them.
// A request of another kind or limit is refused with a
// [*dlock.ConflictError]; a mutex request finds out through its own
// script's refusal (the state has no mutex token), at no cost to the
// mutex's path. A state edited into what dlock never writes (more weight
// held than the limit, a count below 1, an unknown kind) is refused with
// [ErrForeignData] and left as it is.
//
// # Elections and watching
//
// The backend grants dlock.Election (see [Backend.CanGrant]) and
// implements [dlock.Proclaimer] and [dlock.Watcher], on a single server,
// Sentinel and Cluster alike. An election is a weighted name of limit 1
// (the scripts above, strict arrival order among candidates) whose state
// hash also keeps the leader's value, field v: written by the grant's
// script, replaced by [Backend.Proclaim] only while the hold is the
// caller's (one script; else dlock.ErrLeaseLost), deleted when the hold
// ends. Inspect shows it in LockInfo.Value with Kind election. A mutex
// asked of an election's name, or a campaign on a mutex's, is refused
// with a [*dlock.ConflictError] and changes nothing.
//
// [Backend.Watch] follows any name, of any kind: it subscribes to
// PREFIX:{NAME}:watch on a pub/sub connection of its own (one per
// Backend, dialed by the first watch) and registers the watcher in
// PREFIX:{NAME}:watchers, a sorted set of watcher ids scored by when
// each counts as gone (60 s, refreshed every 20 s while the watch waits,
// removed when it ends; the key expires with its last watcher, so a dead
// watcher leaves nothing). Every script that changes a name's holders —
// a grant, a re-entry, a release, a give-back, a downgrade, a Proclaim —
// publishes on the watch channel only while that key exists. An
// unwatched mutex pays nothing for it: its uncontended grant asks EXISTS
// of the hash and the watchers key in the one EXISTS it made before
// (a watched name takes the full script, which publishes), and its
// uncontended release is unchanged (registering a watcher writes the
// lease end x into the name's hold, so that its release takes the full
// script). An expiry publishes nothing; the Client reads again when the
// first holder's lease ends. When the pub/sub connection is lost, Wait
// fails, and the Client subscribes and registers again and reads the
// holders, so that what changed meanwhile (a restart that emptied the
// server included) is reported.
//
// # Errors
//
// An unreachable server, a failed authentication and passing server states
// match dlock.ErrBackendUnavailable; a server older than
// [MinServerVersion] gives [ErrServerTooOld]; data dlock did not write at
// a lock's keys gives [ErrForeignData] and is left unchanged (Inspect
// lists it with LockInfo.Bad).
package redis

// Package redis is a dlock backend on Redis: a single server, a master
// managed by Sentinel, or a Redis Cluster, through the go-redis v9 client
// (github.com/redis/go-redis/v9).
//
// Create a backend on a client you already have with [New] (the backend
// never closes it), with [Open] on an address (it dials a client of its
// own), or import the package for its URL schemes and use dlock.Open (see
// [ParseURL] for the forms):
//
//	redis://[USER:PASSWORD@]HOST:PORT[/DB]
//	rediss://...                                       TLS
//	redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]
//	redis+cluster://HOST:PORT[,HOST:PORT...]
//
// go-redis prints its own log lines (failed dials and the like) on stderr
// through one process-wide logger. Importing this package (or redlock)
// replaces that logger with one that sends the lines to slog.Default() at
// debug level; a program that calls goredis.SetLogger in main keeps its
// own.
//
// # Maximum TTL
//
// A TTL is sent as whole milliseconds (PX, rounded up, without overflow).
// The longest TTL is [dlock.MaxTTL] (24 h), the Client's ceiling: Redis
// itself keeps far longer expiries exactly.
//
// # How it works
//
// Each operation is one Lua script, so one round trip, atomic, run with
// EVALSHA (EVAL when the server does not have the script cached). The state
// of a lock lives under one hash tag, PREFIX:{NAME}, so all of it is in one
// Cluster slot: a hash with the holder's owner, reentry count and token,
// whose expiry is the lease's end (an uncontended grant, renewal and
// release read no clock: a hash that exists is a live lease; once waiters
// keep the hash longer, the lease end is written into it and judged
// against the server's clock, TIME); and, for fair
// locks, a queue of waiters with a deadline each. Names are escaped for the
// hash tag ({, }, % and glob characters become %XX). Tokens come from a
// fence key shared by many names (see State and Guarantees).
//
// # State
//
// What a lock keeps in Redis, and for how long:
//
//   - held: its hash, expiring at the end of the lease (moved on by each
//     renewal), so a holder that dies leaves nothing once its lease is
//     over;
//   - waited on: the same hash, kept (PEXPIREAT) at least until the end of
//     the last waiting Lock's next attempt (at most the holder's remaining
//     lease plus the waiter timeout, [WaiterTimeout]); with dlock.Fair
//     also PREFIX:{NAME}:queue and :timeouts, which expire a second after
//     the last queued waiter's deadline (a waiter timeout after its last
//     attempt), and the hash lasts as long as they do;
//   - after release: nothing. A release that frees the lock with nobody
//     waiting deletes the hash in the same script; a lock freed while
//     others wait keeps it until the waiters' hint or queue ends (their
//     next attempt, or the release of the one that gets the lock, deletes
//     it once nobody waits). An abandoned lock (holder and waiters dead) is gone at
//     most a waiter timeout plus a second after its lease and its waiters'
//     deadlines are over, by Redis's own expiry: no sweep, no background
//     job.
//
// Beyond the names in use, the backend keeps its fence keys, which never
// expire: on a single server or a Sentinel-managed master one key,
// PREFIX:fence; on a Cluster one per slot in use, PREFIX:fence:{TAG} (TAG
// is the smallest decimal number whose CRC16 falls in the slot), so at
// most 16384 whatever the number of names. A hash written by a dlock version before reclamation
// has no expiry: it goes at its next release.
//
// An uncontended Lock or TryLock is one command (a script of EXISTS, INCR
// of the fence key, HSET and PEXPIRE; with [ClockTokens], TIME and GETSET
// in place of INCR), and so is Unlock (HMGET and DEL). A
// reentrant acquisition by the same owner increments the count kept in the
// hash and returns the same token; a new grant takes a new token, strictly
// greater than every earlier token of the lock name.
//
// A Lock that finds the lock held waits for a notice instead of polling:
// a release publishes on the lock's channel when someone may be waiting (a
// failed attempt of a waiting Lock leaves a mark in the hash that lasts
// past that waiter's next attempt; a release with nobody waiting publishes
// nothing), and each Backend keeps one pub/sub connection for all its
// waiters, with one subscription per lock waited on. A waiter's attempts
// are made while its subscription is confirmed, so a release cannot slip in
// between an attempt and the wait that follows it. A release wakes one
// waiter per process (in a fair queue, exactly the head of the queue; when
// the head waits in the releasing process, that process wakes it directly
// and nothing is published). Because an expiry publishes nothing, every
// wait is bounded by the holder's remaining lease as the last attempt saw
// it.
//
// With dlock.Fair the script keeps a FIFO queue on the server; the lock
// goes to the queue's head only. When the head waits in the releasing
// process, the release script hands the lock to it directly (a new grant
// with a new token, made by the waiter's request id), so a hand-off within
// a process costs the release's round trip only; a waiter that gives up
// instead gives the grant back. Each queued waiter has a deadline (see
// [WaiterTimeout]) that it renews while it waits; a waiter whose process
// died drops out when its deadline passes, and a waiter that gives up
// leaves the queue at once.
//
// The Client renews all its leases on a server in one script call per tick
// ([Backend.RenewBatch]; one call per slot on a Cluster, pipelined per
// node). [Backend.Inspect] lists the held locks with SCAN (on every master
// of a Cluster).
//
// # Guarantees
//
// A lock is exclusive as long as the Redis node that holds it keeps its
// data. Redis replication is asynchronous: when a master fails, Sentinel or
// Cluster may promote a replica that has not received the latest grant, and
// the lock can then be granted to a second owner while the first still
// believes it holds it. A server restarted without persistence forgets
// every lock. [WaitReplicas] makes grants wait until replicas acknowledge
// them, which narrows this window but does not close it (WAIT is not
// consensus). For mutual exclusion that survives failures, use a quorum
// store (ZooKeeper, etcd) or Redlock with its timing assumptions.
//
// What keeps the protected resource safe in either case is the fencing
// token: pass Lease.Token to the resource and let it reject writes that
// carry a token lower than one it has seen. The fence key holds the
// highest token granted in the lock's slot and is raised in the same
// script as each grant, so deleting a lock's hash never lets a later token
// of that name be smaller or equal, however the server's clock moves.
//
// With [ClockTokens] (the default for Sentinel, Cluster and
// [WaitReplicas]) a new token is max(fence+1, server time in µs): tokens
// keep increasing even when the fence key itself is lost in a failover or
// restart, as long as the servers' clocks agree to better than the time
// between the lost grant and the next one. Without it (the default on a
// single server) an uncontended grant takes fence+1, which spares the
// server a clock read and about a third of the grant's cost; a fence key
// that is missing (a restart without persistence) starts again at the
// server time in µs, but a replica promoted with a fence behind the lost
// grants can give a lost grant's token again, so turn ClockTokens on for a
// single address that a failover can move. Contended grants always take
// the clock form. Tokens are therefore large and not always consecutive;
// they increase per name, and the tokens of names that share a fence key
// are distinct.
//
// Lease expiry is judged by the server's clock (key expiry, and TIME in
// the scripts), which makes a step of that clock unsafe. When the Redis server's clock
// steps forward by more than a lease's remaining TTL, every lease looks
// expired to the scripts at once: the lock is granted to the next owner
// that asks, while the first holder's Client still reports its lease valid
// until its next renewal fails (within TTL/3, at the latest at
// [dlock.Lease.Deadline]; seen: two holders for 2.3 s after a 30 s step).
// Tokens still increase (the fence key is never deleted), so a
// resource that checks them rejects the first holder's writes once it has
// seen the new token; nothing else protects it. A backward step lengthens
// every lease by the step. Keep the server's clock slewed, not stepped.
//
// Keep the eviction policy at noeviction: the lock hashes carry expiries,
// so a volatile-* policy may evict a held lock, which is a lost lock (an
// evicted fence key is handled as above).
//
// # Errors
//
// An unreachable server, a failed authentication and server states that
// pass (loading, failover) give errors matching dlock.ErrBackendUnavailable
// that name the address. A server older than [MinServerVersion] gives
// [ErrServerTooOld]. Data that dlock did not write at one of a lock's keys
// (another type, a hash field that is not a number or is missing, a token
// at [MaxToken], above which Lua's doubles are not exact) gives
// [ErrForeignData] (which is dlock.ErrForeignData), naming the key and
// what is wrong, and is left unchanged; Inspect lists such keys with
// LockInfo.Bad set.
package redis

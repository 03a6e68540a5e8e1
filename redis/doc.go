// Package redis is a dlock backend on Redis: a single server, a master
// managed by Sentinel, or a Redis Cluster, through the go-redis v9 client
// (github.com/redis/go-redis/v9).
//
// Create a backend on a client you already have with [New] (the backend
// never closes it), or import the package for its URL schemes and use
// dlock.Open (see [OpenURL] for the forms):
//
//	redis://[USER:PASSWORD@]HOST:PORT[/DB]
//	rediss://...                                       TLS
//	redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]
//	redis+cluster://HOST:PORT[,HOST:PORT...]
//
// # How it works
//
// Each operation is one Lua script, so one round trip, atomic, run with
// EVALSHA (EVAL when the server does not have the script cached). The state
// of a lock lives under one hash tag, PREFIX:{NAME}, so all of it is in one
// Cluster slot: a hash, never deleted, with the holder's owner, reentry
// count and lease end (judged against the server's clock, TIME) and the
// last token granted (the fence), which stays when the lock frees; and, for
// fair locks, a queue of waiters with a deadline each. Names are escaped
// for the hash tag ({, }, % and glob characters become %XX).
//
// An uncontended Lock or TryLock is one command, and so is Unlock. A
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
// carry a token lower than one it has seen. The tokens come from the fence
// key and are at least the server's clock in microseconds, so they keep
// increasing even when the fence key itself is lost in a failover or
// restart, as long as the servers' clocks agree to better than the time
// between the lost grant and the next one. Tokens are therefore large and
// not consecutive.
//
// Lease expiry is judged by the server's clock (PX). Keep the eviction
// policy at noeviction or a volatile-* policy: an evicted fence key is
// handled as above, but an evicted holder is a lost lock.
//
// # Errors
//
// An unreachable server, a failed authentication and server states that
// pass (loading, failover) give errors matching dlock.ErrBackendUnavailable
// that name the address. A server older than [MinServerVersion] gives
// [ErrServerTooOld]. Data that dlock did not write at one of a lock's keys
// gives [ErrForeignData], naming the key, and is left unchanged.
package redis

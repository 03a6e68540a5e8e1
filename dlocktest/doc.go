// Package dlocktest is the conformance suite for dlock backends, in the
// manner of testing/fstest and golang.org/x/net/nettest: a backend's tests
// call [Run] with a [Factory] that connects a new backend to the store
// under test (see the example of Run), and so can a third party's.
//
// # Items
//
// Run runs every item as a named subtest, on fresh lock names, under a
// watchdog that ends a hung test with a dump of every goroutine; most
// items side by side, those that need the store to themselves alone (see
// [Run] for the rule); and a goroutine leak check once all are over. The
// items, one file each group:
//
//   - basics.go: exclusion, increasing tokens, bad input, many names,
//     Close with locks held.
//   - leases.go: expiry of an abandoned hold, release after loss, renewal,
//     MaxHold, Extend.
//   - reentrancy.go: reentry by explicit owner and by a lease in the context.
//   - waiters.go: fair FIFO order, TryLock while held, cancelled waiters
//     that leave nothing behind, waiters counted by Inspect.
//   - edges.go: waiters woken rather than polling, extreme TTLs, namespaces.
//   - faults.go: through a backend wrapper that loses an answer, goes
//     silent or dies: an Extend to a shorter TTL whose answer is lost
//     counts as applied (LostShorterExtend); WithTimeout on a lease's
//     context fires (LeaseContextTimeout); a silent or dead store is never
//     reported as a busy lock alone (SilentStoreNotBusy,
//     StoreDownWhileWaiting).
//   - foreign.go, reclaim.go: records dlock did not write, and reclaimed
//     state, through hooks the backend's test gives ([PlantForeign],
//     [Reclaim]); skipped without them.
//
// Run the suite under the race detector.
//
// # Helpers
//
// [WaitFor] polls a condition with a deadline, for a backend's own tests
// that wait for its store to settle. [Churn] locks and releases many names.
//
// # Benchmarks
//
// [Bench] runs the standard workloads on the same kind of factory;
// [BenchLockers] runs them on any [Locker], another library's included.
package dlocktest

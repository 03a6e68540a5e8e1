// Package testserver starts real servers for tests — redis-server (single,
// N independent, Cluster, primary+replica+Sentinel), ZooKeeper (standalone
// and ensemble), etcd (single member and cluster), PostgreSQL and MariaDB —
// on free loopback ports in temporary directories, and stops them when the
// test ends.
//
// # Usage
//
//	func TestSomething(t *testing.T) {
//		srv := testserver.Redis(t)          // skips if redis-server is missing
//		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
//		...
//		srv.Kill()                          // SIGKILL, then wait for the exit
//		srv.Restart()                       // same port, same data dir, waits until ready
//	}
//
// Every constructor takes a testing.TB (or any [T]), starts the server as a direct child
// process (exec.Cmd, no daemonizing wrapper) with its output in a log file,
// waits until a real protocol check passes (PING, srvr, /health, a
// PostgreSQL or MySQL login plus a query) and registers a t.Cleanup that
// kills the processes, waits for them, removes the temporary directories and,
// if the test failed, prints the tail of every server log with t.Log.
// Nothing started here outlives the test: the goroutine that reaps each
// process ends before the cleanup returns, so goleak checks stay clean, and
// the readiness checks use their own short-lived connections (no
// http.Client, no client libraries). On Linux the servers get Pdeathsig
// SIGKILL, so they die with the test binary even when cleanups never run
// (a go test -timeout panic). If a port turns out to be taken when a server
// starts, new ports are picked and the start is retried; a readiness check
// passes only if our process holds the listening socket, never someone
// else's server on the same port.
//
// # Faults
//
// Every server handle embeds *Process, which offers Kill (SIGKILL), Stop
// (graceful, with the right signal for the server: SIGINT for PostgreSQL,
// SIGTERM for the others), Start, Restart, Pause (SIGSTOP), Resume (SIGCONT),
// PID and Log. These methods return errors instead of failing the test, so
// they may be called from any goroutine, for example a fault injector running
// next to the workload. Multi-node handles (RedisGroup, RedisClusterGroup,
// SentinelGroup, ZooKeeperGroup, EtcdGroup) expose their nodes with Node(i)
// and their addresses with Addrs; ZooKeeperGroup and EtcdGroup can find the
// current leader.
//
// Started WithIsolation (Linux, root, iproute2's ip: see CanIsolate), each
// member of a ZooKeeperGroup or EtcdGroup runs in a network namespace of its
// own, joined to the others and to the host by a bridge on a free
// 10.x.y.0/24; the group's Cut(i) takes member i's link down (it is cut off
// from the other members and from every client, both ways) and Heal(i)
// brings it back. The clean-up removes the namespaces and the bridge; those
// of a process killed before its clean-up are removed by the next group
// started WithIsolation.
//
// # Environment
//
//   - DLOCK_TEST_REQUIRE: "all", or a comma-separated list of kinds (redis,
//     zookeeper, etcd, postgres, mariadb). A required server whose binaries are
//     missing fails the test instead of skipping it. See Need and Require.
//   - DLOCK_TEST_KEEP=1: keep the temporary directories (data and logs) after
//     the test; their paths are logged.
//
// Binaries are looked up in PATH and in the places Debian installs them
// (/usr/sbin, /usr/lib/postgresql/*/bin, /usr/share/java). When the tests
// run as root, PostgreSQL (which refuses to run as root) is run as the
// "postgres" system user.
package testserver

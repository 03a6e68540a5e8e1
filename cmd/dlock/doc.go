// Command dlock runs programs under distributed locks, like flock(1) across
// machines, and shows who holds which lock.
//
// Usage:
//
//	dlock run [--url URL] [--connect-timeout D] --name NAME [--ttl D] [--wait D] [--owner ID] [--fair] [--grace D] -- COMMAND [ARG...]
//	dlock status [--url URL] [--connect-timeout D] [--prefix P]
//	dlock migrate [--url URL] [--connect-timeout D]
//	dlock bench [--url URL] [--workloads W,...] [--duration D] [--fair] [--json]
//	dlock help [COMMAND]
//
// The backend is named by a URL: --url, else $DLOCK_URL, else an SQLite
// file in the user's state directory,
// sqlite://$XDG_STATE_HOME/dlock/locks.db (or ~/.local/state/dlock/locks.db),
// which coordinates the user's own processes on one host: another user, and
// root under sudo, have a file of their own. 'dlock help run' shows how to
// set up a database that every user of a host shares, for locks like
// flock(1)'s on a shared file.
//
// # dlock run
//
// dlock run waits for the lock NAME, then runs COMMAND holding it and
// releases it when COMMAND exits. Like flock(1), it waits for as long as it
// takes unless told otherwise: --wait 0 fails at once if the lock is held
// (flock -n), --wait 30s waits at most 30 seconds (flock -w). While it
// waits it says on stderr who holds the lock, and again whenever the holder
// changes.
//
// COMMAND runs with stdin, stdout and stderr passed through, in a process
// group of its own (given the terminal when dlock has it), with
// DLOCK_NAME, DLOCK_TOKEN (the fencing token of the grant), DLOCK_OWNER and
// DLOCK_URL in its environment. The lease is renewed every TTL/3 while
// COMMAND runs. If it is lost nonetheless — the backend gave the lock away
// or could not be reached before the lease ran out — dlock sends SIGTERM to
// COMMAND's process group, SIGKILL after --grace, and exits 4.
// If dlock itself dies (kill -9, the OOM killer), COMMAND's process group
// dies with it before the lock can be granted again: a guard process (a
// second dlock) joins the group before COMMAND starts and kills it with
// SIGKILL when dlock is gone, and on Linux COMMAND also has
// PR_SET_PDEATHSIG(SIGKILL). Processes
// that leave the group (setsid, setpgid) are not killed; 'dlock help run'
// lists the other limits.
// SIGHUP, SIGINT, SIGQUIT and SIGTERM sent to dlock are passed on to
// COMMAND's process group, except those that dlock was started with
// ignored (SIGHUP under nohup), which stay ignored by both; the lock is
// released once COMMAND has exited. Suspending dlock for longer than the
// TTL loses the lock.
//
// # Exit status of dlock run
//
//	N      COMMAND ran, holding the lock throughout, and exited with status N
//	128+N  COMMAND was killed by signal N (130 for SIGINT, 143 for SIGTERM),
//	       or dlock got signal N while it was waiting for the lock
//	2      usage error: a bad flag, URL, lock name, owner or TTL
//	3      the lock is busy: not acquired within --wait
//	4      the lock was not held throughout: the lease was lost while
//	       COMMAND ran (COMMAND was terminated, or had just exited), or the
//	       release found the lock taken over by another owner
//	5      backend error: the backend cannot be opened or does not answer
//	126    COMMAND cannot be executed (for example permission denied)
//	127    COMMAND was not found
//
// A COMMAND that itself exits with 2, 3, 4 or 5 is not told apart from
// dlock's own codes except by the message dlock writes on stderr, which it
// does for every code of its own.
//
// # dlock status
//
// dlock status lists the locks held on the backend (those whose names start
// with --prefix) with owner, fencing token, reentry count, remaining lease
// and waiters. It exits 0 on success, 1 if the backend cannot list locks,
// 2 on a usage error and 5 on a backend error.
//
// # dlock migrate
//
// dlock migrate creates the lease table and the waiters table of an SQL
// backend (sqlite, postgres, mysql; the table is the URL's ?table=) if they
// do not exist, and checks that existing ones are dlock's. The backends do
// the same on first use; migrate does it ahead of time, for instance as a
// user allowed to create tables. Other backends keep no tables: it says so
// and exits 0. It exits 2 on a usage error and 5 if the backend cannot be
// opened or a table of that name is not dlock's.
//
// # dlock bench
//
// dlock bench measures the backend with the standard workloads of package
// dlocktest, each timed after a 0.5 s warm-up: uncontended, distinct
// names, 8 and 64 contenders on one name, a herd of 10, 100 and 1,000
// waiters, and 10,000 and 100,000 leases held. It prints a table on stdout
// (--json: JSON) with the backend calls per operation and, on Redis, etcd,
// ZooKeeper and MySQL, the requests the store counted. It exits 0 when every workload ran, 1 if
// one failed, 2 on a usage error and 5 on a backend error.
package main

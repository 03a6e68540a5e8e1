// Command dlock runs programs under distributed locks, like flock(1) across
// machines, and shows who holds which lock. Each command is described in
// full by 'dlock help COMMAND'; this is the overview.
//
// Usage:
//
//	dlock run [flags] NAME [--] COMMAND [ARG...]      (or NAME -c STRING, or --name NAME -- COMMAND)
//	dlock hold [flags] NAME
//	dlock release --force [--yes] [flags] NAME
//	dlock elect [flags] NAME [--] COMMAND [ARG...]
//	dlock leader [--json] [--watch] [flags] NAME
//	dlock status [--json] [--watch] [--prefix P] [flags] [NAME...]
//	dlock migrate [flags]
//	dlock bench [flags]
//	dlock verify (--url URL | --local KIND) --out DIR [flags]
//	dlock version
//	dlock completion bash|zsh|fish
//	dlock help [COMMAND]
//
// The backend is named by a URL: --url, else $DLOCK_URL, else an SQLite
// file in the user's state directory,
// sqlite://$XDG_STATE_HOME/dlock/locks.db (or ~/.local/state/dlock/locks.db),
// which coordinates the user's own processes on one host. 'dlock help run'
// shows how to share one database among all users of a host; 'dlock help'
// lists the URL schemes built in. mem:// is refused by the commands that
// lock: it would exclude nothing between processes.
//
// # run
//
// dlock run waits for the lock NAME, runs COMMAND holding it, and releases
// it when COMMAND exits. With NAME as an argument it follows flock(1): the
// same spellings (-n, -w, -E, -c, -s, -x, -F, --verbose), silence while
// waiting off a terminal, exit 1 when busy, 64 for a bad option, 69 when
// COMMAND cannot be executed. With --name it follows dlock's own
// conventions: exit 3 when busy, 2 for a bad option. --limit N takes one of
// N permits of a semaphore, -s and -x the read and write sides of a
// read-write lock; --min-hold D keeps the name taken until D after the
// grant even if COMMAND finishes sooner (for scheduled jobs). COMMAND gets
// DLOCK_NAME, DLOCK_TOKEN (the fencing token), DLOCK_OWNER and DLOCK_URL
// (without secrets); if the lease is lost it gets SIGTERM, then SIGKILL
// after --grace, and dlock exits 4. If dlock dies, COMMAND's process group
// dies with it. --ttl is how long the backend keeps the lock after dlock
// dies; on ZooKeeper dlock sets the session timeout to it.
//
// Exit status: COMMAND's own (128+N if killed by signal N); 1 or 3 busy
// (or -E's code); 2 (64) configuration error; 4 the lock was not held
// throughout; 5 backend error; 6 foreign data in the store; 7 the release
// failed after COMMAND succeeded; 126 (69) COMMAND cannot be executed;
// 127 (69) not found. dlock writes a message on stderr for each code of
// its own.
//
// # hold
//
// dlock hold takes the lock NAME, prints its token on stdout and holds it,
// renewing it, until interrupted (like etcdctl lock); then it releases it.
//
// # release
//
// dlock release --force releases a stuck lock held by someone else, after
// saying who holds it and asking for confirmation (unless --yes). The old
// holder's lease is lost, and its token is never granted again: the next
// grant's is higher, so a resource that checks tokens refuses its late
// writes. A free or unknown name is an error and changes nothing.
//
// # elect
//
// dlock elect campaigns in the election NAME with --value (default:
// host/pid) and runs COMMAND while this process leads; DLOCK_TOKEN is the
// term. Losing leadership ends COMMAND as a lost lease does under run.
//
// # leader
//
// dlock leader prints the election's leader, its value and term, or "no
// leader" (exit 1); --json as an object, --watch a line per change.
//
// # status
//
// dlock status lists the holders of the locks on the backend (or of the
// names given): owner, token, kind, weight, reentry count, lease left and
// waiters; data dlock did not write is listed and marked. --json prints
// JSON, --watch follows the changes.
//
// # migrate
//
// dlock migrate creates the tables of an SQL backend (sqlite, postgres,
// mysql) ahead of first use and checks that existing ones are dlock's;
// other backends keep no schema.
//
// # bench
//
// dlock bench measures the backend with the standard workloads
// (uncontended, distinct names, contended, herds of waiters, many leases
// held) and prints a table, or JSON with --json.
//
// # verify
//
// dlock verify proves the lock's guarantees on a store: worker processes
// contend for a lock and do fenced writes while faults are injected
// (pauses, kills, cut connections, clock skew); the recorded history is
// checked for overlapping grants, tokens that go back, and stale writes
// accepted.
//
// # version
//
// dlock version (or --version) prints the module version and VCS revision
// from the build info.
//
// # completion
//
// dlock completion prints a completion script for bash, zsh or fish.
//
// # help
//
// dlock help lists the commands in groups with an example each; dlock help
// COMMAND shows a command's flags and exit status.
package main

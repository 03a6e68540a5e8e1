package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redact"
)

const (
	defaultGrace = 10 * time.Second
	// openTimeout bounds opening the backend.
	openTimeout = 30 * time.Second
	// unlockTimeout bounds the release after the command has exited.
	unlockTimeout = 10 * time.Second
	// lostUnlockTimeout bounds the release of a lease that was lost, a
	// courtesy that frees the lock early if nobody has taken it yet; the
	// backend that failed to renew it may well not answer now either.
	lostUnlockTimeout = 2 * time.Second
)

func init() {
	commands = append(commands, &command{
		name:     "run",
		synopsis: "dlock run [flags] NAME [--] COMMAND [ARG...] | NAME -c STRING | --name NAME -- COMMAND [ARG...]",
		usage:    runUsage,
		flags:    runFlagSet,
		order:    runOrder,
		run:      runRun,
		args:     true,
	})
}

// runOrder is the order of dlock run's flags in its help.
var runOrder = []string{"url URL", "connect-timeout D", "name NAME", "n|nb|nonblock|nonblocking", "w|wait|timeout D",
	"E|conflict-exit-code N", "c|command STRING", "s|shared", "x|e|exclusive", "limit N", "ttl D", "min-hold D", "owner ID",
	"fair", "grace D", "F|no-fork", "quiet", "verbose"}

const runUsage = `Usage: dlock run [flags] NAME [--] COMMAND [ARG...]
       dlock run [flags] NAME -c STRING
       dlock run [flags] --name NAME -- COMMAND [ARG...]

Run COMMAND while holding the lock NAME, like flock(1) across machines.

With NAME as an argument, dlock run follows flock(1)'s conventions, so that
a script written for flock (a file path as NAME) behaves the same: a busy
lock exits 1 (or -E's code), a bad option 64, a command that cannot be
executed 69, and nothing is said on stderr while waiting or when the lock is
busy, unless --verbose or stderr is a terminal. With --name, dlock's own
conventions hold: a busy lock exits 3 (or -E's code), a bad option 2, and
dlock says on stderr who holds the lock while it waits. Both take every
spelling flock has for the options they share (-n, --nb, --nonblock,
--nonblocking; -w, --wait, --timeout; -E, --conflict-exit-code; -c,
--command; -s, --shared; -x, -e, --exclusive; -F, --no-fork; --verbose).
flock's -o (close), -u (unlock) and file-descriptor forms have no meaning
here; -n and -w together are refused (flock lets -n win).

What NAME is: a mutex (one holder) unless a flag says otherwise. --limit N
makes it a semaphore of N permits (at most N holders at once; every holder
must give the same N). -s takes a read lock and -x (or -e) the write lock of
NAME as a read-write lock: readers share it, a writer excludes everyone.
Note that a plain dlock run NAME (no -s, no -x) takes NAME as a mutex, as
it always has, which a read-write lock of that name refuses: give -x to
every writer of a name that readers take with -s.

On a terminal, dlock keeps one line on stderr up to date while it waits:
how long it has waited and for whom. --quiet silences it.

dlock waits for the lock (for as long as it takes, as flock does, unless
--wait says otherwise), runs COMMAND holding it, and releases it when COMMAND
exits. While it waits it says on stderr who holds the lock, and again when
the holder changes. The lease is renewed every TTL/3 while COMMAND runs.

Scheduled jobs: --min-hold D keeps NAME taken until D after the grant even
when COMMAND finishes earlier (ShedLock's lockAtLeastFor), so that the same
cron entry on a host whose clock or timer is a little late finds the lock
busy and does not run the job a second time:
  dlock run -n --min-hold 5m nightly ./report.sh     (in every host's crontab)
dlock still exits as soon as COMMAND does: rather than release the lock, it
leaves it in the store to expire D after the grant, judged by the store's
clock, with no process left running. A COMMAND that runs longer than D
releases the lock as usual. Only backends whose locks outlive their client
can: redis, redlock, and the lease tables of sqlite, postgres and mysql;
the others (etcd, zookeeper, the SQL session modes) refuse --min-hold with
exit 2.

COMMAND gets stdin, stdout and stderr, runs in a process group of its own
(given the terminal if dlock has it in the foreground), and finds in its
environment:
  DLOCK_NAME    the lock's name
  DLOCK_TOKEN   the fencing token of this grant: a number that increases with
                every grant of the lock; give it to the resource you protect
                so that it can refuse a holder that lost the lock unawares
  DLOCK_OWNER   the owner id of the grant
  DLOCK_URL     the backend's URL without its secrets (the password before
                the @ and parameters such as password= and sslpassword=
                are left out), so that dlock run and dlock status inside
                COMMAND use the same backend; a COMMAND that needs the
                credentials must be given them another way (a file, a
                variable of your own)

If the lease is lost while COMMAND runs (the backend gave the lock away, or
could not be reached until the lease ran out), dlock sends SIGTERM to
COMMAND's process group, SIGKILL after --grace, and exits 4.

If dlock itself dies while COMMAND runs (kill -9, the OOM killer), COMMAND's
process group dies with it, before the lease can run out and the lock be
granted again: a guard, a second dlock process that joins the group before
COMMAND starts, does nothing but kill the group with SIGKILL when dlock is
gone; on Linux COMMAND also has PR_SET_PDEATHSIG(SIGKILL). Limits:
processes that leave the group (setsid, setpgid, a shell with job control)
are not killed; if the guard itself is killed, only COMMAND dies with
dlock, and only on Linux; the guard must get to run within the TTL (not on
a frozen machine); on Windows there is no guard. What COMMAND leaves
running when it exits is not killed, and no longer holds the lock.

SIGHUP, SIGINT, SIGQUIT and SIGTERM sent to dlock are passed on to COMMAND's
process group, except those dlock was started with ignored (SIGHUP under
nohup), which stay ignored by both; dlock releases the lock once COMMAND has
exited. Suspending dlock (Ctrl-Z) for longer than the TTL loses the lock.

Flags:
%FLAGS%
Durations are Go durations (500ms, 30s, 1m30s) or plain numbers of seconds.
As flock -w does, --wait D makes one attempt however short D is (bounded by
the backend's request timeout, not by D), then waits for the rest of D.
Opening the backend (its tables created included) is bounded by 30s, or
twice the connect timeout if that is longer; a connect timeout of 0 removes
the bound.

Backend:
  The backend is named by a URL: --url, else $DLOCK_URL, else an SQLite file
  in your state directory, sqlite://$XDG_STATE_HOME/dlock/locks.db (or
  ~/.local/state/dlock/locks.db), which coordinates your own processes on
  this host only: another user, and root under sudo, have a file of their
  own, so their dlock run and yours never exclude each other. Locks across
  hosts need a server backend ('dlock help' lists the URL schemes built in).
  mem:// is refused (exit 2): it keeps its locks in dlock's own process, so
  two dlock run would never exclude each other.

  A lock for every user of the host, as flock(1) gives on a shared file:
  have an administrator create a database that every user can write, in a
  directory that every user can write (SQLite adds locks.db-wal and
  locks.db-shm beside it, with the database's permissions), once:
    sudo install -d -m 0777 /var/lib/dlock
    sudo dlock migrate --url sqlite:///var/lib/dlock/locks.db
    sudo chmod 0666 /var/lib/dlock/locks.db
  and use --url sqlite:///var/lib/dlock/locks.db, or set DLOCK_URL to it for
  every user (sudo resets the environment: /etc/environment, or sudo
  --preserve-env=DLOCK_URL). Every user can then hold, or delete, any lock
  in it; a group and modes 2770 and 0660 narrow that to the group.

  How long a dlock that dies (kill -9, a crash, a frozen or cut-off host)
  keeps the lock: --ttl. On ZooKeeper the lock lives as long as dlock's
  session, so dlock run, hold and elect open a zk:// URL that has no
  session_timeout with a session timeout of --ttl (30s without --ttl): the
  servers then give the lock up --ttl after dlock stops answering, as the
  other backends do. The servers grant session timeouts between their
  minSessionTimeout and maxSessionTimeout only (2 and 20 tickTimes: 4s and
  40s with the default tickTime of 2s): a --ttl below the minimum is refused
  (exit 2), as one above the maximum is, rather than kept longer or shorter
  than asked. A URL with a session_timeout of its own keeps it: then a dead
  dlock keeps the lock for that session timeout, which must be at least
  --ttl.

  A stuck lock (its holder died) frees itself when its TTL runs out; dlock
  status shows who holds it and for how long. To free it at once, stop the
  holder, then delete the lock's row, never the file:
    sqlite3 locks.db "DELETE FROM dlock_locks WHERE name = 'NAME'"
  Deleting or replacing the file (rm locks.db) is not how to clear a lock:
  processes that have it open keep using the old file; a holder learns at its
  next renewal that its lease is lost (exit 4).

Exit status:
  N       COMMAND ran, holding the lock throughout, and exited with status N
  128+N   COMMAND was killed by signal N (130 for SIGINT, 143 for SIGTERM),
          or dlock got signal N while it was waiting for the lock
  2       configuration error: a bad flag, URL, lock name, owner or TTL,
          mem://, or no home directory for the default database
  1       with NAME as an argument (flock's conventions): the lock is busy,
          not acquired within --wait (-E N: N instead)
  3       with --name: the lock is busy, not acquired within --wait (-E N: N)
  4       the lock was not held throughout: the lease was lost while
          COMMAND ran (COMMAND was terminated, or had just exited), or the
          release found the lock taken over by another owner
  5       backend error: the backend cannot be opened or does not answer
  6       foreign data: where the lock's state goes, the store holds data
          dlock did not write (dlock status lists it under FOREIGN DATA);
          remove or repair it, or use another table, prefix or namespace
  7       the release failed after COMMAND exited 0: the lock stays held
          until its TTL runs out (when COMMAND failed, its own status is
          kept and stderr says that the release failed too)
  64      with NAME as an argument: a bad option (flock's EX_USAGE)
  69      with NAME as an argument: COMMAND cannot be executed (flock's)
  126     COMMAND cannot be executed (e.g. permission denied)
  127     COMMAND was not found
  dlock writes a message on stderr for each code of its own, so a COMMAND
  that exits 2-7 itself can be told apart by the absence of one.

Examples:
  dlock run nightly ./job.sh                       wait for the lock, then run
  dlock run -n nightly ./job.sh                    exit 1 at once if it is held
  dlock run -w 2.5 -E 75 nightly -c 'make deploy'  wait 2.5s at most, else 75
  dlock run --limit 4 encoders -- ffmpeg ...       one of 4 permits
  dlock run -s catalog -- ./read.sh                shared with other readers
  dlock run -x catalog -- ./rebuild.sh             alone: no reader, no writer
  dlock run --name nightly --wait 0 -- ./job.sh    exit 3 at once if it is held
`

// runFlags are the flags of dlock run (and of hold and elect, which take
// a lock the same way).
type runFlags struct {
	backendFlags
	fs       *flag.FlagSet
	name     string
	ttl      optDuration
	minHold  optDuration
	wait     optDuration
	waitErr  error // a bad -w/--wait/--timeout, reported by check
	nonblock bool
	conflict exitCodeFlag
	command  string
	mode     string // "", "shared" or "exclusive"
	limit    int
	owner    string
	fair     bool
	grace    optDuration
	noFork   bool
	quiet    bool
	value    string // dlock elect's --value
	elect    bool   // dlock elect: campaign rather than lock

	flock  bool     // the name was an argument: flock(1)'s conventions
	dashes bool     // the arguments followed "--": no NAME among them
	argv   []string // the command to run
}

func runFlagSet(fs *flag.FlagSet) any {
	f := &runFlags{fs: fs, grace: optDuration{d: defaultGrace}}
	f.define(fs, "print flock's lines (how long getting the lock took, the\ncommand executed, why it was not acquired) and the\nlibrary's renewal errors and other details")
	fs.StringVar(&f.name, "name", "", "the lock's name: 1-255 bytes of UTF-8 without NUL; or give\nit as the first argument, as flock's FILE")
	fs.Var(&f.ttl, "ttl", "lease time to live: how long the backend keeps the lock\nafter dlock stops renewing it, e.g. dies (default 30s,\nminimum 100ms); on ZooKeeper the session timeout too\n(see Backend)")
	fs.Var(&f.minHold, "min-hold", "keep the name taken until D after the grant even if\nCOMMAND exits earlier, with no process left running (see\nScheduled jobs above)")
	for _, n := range []string{"n", "nb", "nonblock", "nonblocking"} {
		fs.BoolVar(&f.nonblock, n, false, "do not wait: fail at once if the lock is held (as --wait 0)")
	}
	for _, n := range []string{"w", "wait", "timeout"} {
		fs.Var(lenientDuration{&f.wait, &f.waitErr}, n, "how long to wait for the lock, in seconds (fractions\nallowed) or a Go duration; without it, as long as it\ntakes (like flock); 0: not at all (like -n)")
	}
	for _, n := range []string{"E", "conflict-exit-code"} {
		fs.Var(&f.conflict, n, "the exit code when the lock is busy (0-255; default 1 as\nflock's with NAME as an argument, 3 with --name)")
	}
	for _, n := range []string{"c", "command"} {
		fs.StringVar(&f.command, n, "", "run STRING through $SHELL -c (else /bin/sh), as flock -c;\nno COMMAND may follow")
	}
	for _, n := range []string{"s", "shared"} {
		fs.Var(modeFlag{&f.mode, "shared"}, n, "a read lock of the read-write lock NAME: shared with other\n-s holders, excluding -x")
	}
	for _, n := range []string{"x", "e", "exclusive"} {
		fs.Var(modeFlag{&f.mode, "exclusive"}, n, "the write lock of the read-write lock NAME (see below)")
	}
	fs.IntVar(&f.limit, "limit", 0, "one of N permits of the semaphore NAME: at most N holders\nat once")
	fs.StringVar(&f.owner, "owner", "", "explicit owner id: another dlock run with the same owner\nre-enters the lock while this one holds it (nested holds,\nsame token); default: a fresh random id per run")
	fs.BoolVar(&f.fair, "fair", false, "acquire in arrival order among fair waiters")
	fs.Var(&f.grace, "grace", "after SIGTERM on a lost lease, how long to wait before\nSIGKILL (default 10s)")
	for _, n := range []string{"F", "no-fork"} {
		fs.BoolVar(&f.noFork, n, false, "accepted for flock's scripts; dlock stays to renew the\nlease, and the exit status is the command's either way")
	}
	fs.BoolVar(&f.quiet, "quiet", false, "say nothing while waiting, on a terminal or not")
	return f
}

func (f *runFlags) afterDashes(d bool) { f.dashes = d }

func (f *runFlags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// usage reports a usage error: exit 64 under flock's conventions, else 2.
func (f *runFlags) usage(e *env, cmd string, format string, args ...any) int {
	code := usageError(e, lookup(cmd), format, args...)
	if f.flock {
		return flockUsage
	}
	return code
}

// conflictCode is the exit code of a busy lock.
func (f *runFlags) conflictCode() int {
	switch {
	case f.conflict.set:
		return f.conflict.code
	case f.flock:
		return flockConflict
	}
	return exitBusy
}

// silentWhenBusy says whether to keep quiet about waiting and a busy lock
// off a terminal: flock does unless --verbose.
func (f *runFlags) silentWhenBusy(e *env) bool {
	return f.quiet || (f.flock && !f.verbose && !isTerminal(e.stderr))
}

func runRun(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*runFlags)
	cmdName := "run"
	if f.elect {
		cmdName = "elect"
		if f.value == "" {
			host, _ := os.Hostname()
			f.value = fmt.Sprintf("%s/%d", host, os.Getpid())
		}
	}
	if code, ok := f.check(e, cmdName, args, true); !ok {
		return code
	}
	// Find the command before taking the lock.
	cmd, err := findCommand(f.argv)
	if err != nil {
		e.errorf("cannot run %q: %v", f.argv[0], err)
		return f.startFailureCode(err)
	}
	sigs := notifyForwarded()
	defer signal.Stop(sigs)

	// Until the command runs, a signal ends dlock: opening and waiting are
	// cancelled.
	ictx, interrupted := interruptible(ctx, sigs)
	client, url, code := f.open(ictx, e, "run")
	if client == nil {
		if sig := interrupted(); sig != nil {
			return interruptCode(e, sig, fmt.Sprintf("while opening the backend for lock %q", f.name))
		}
		return code
	}
	defer func() {
		if err := client.Close(); err != nil && !errors.Is(err, dlock.ErrClosed) {
			e.errorf("%v", err)
		}
	}()

	lease, err := acquire(ictx, e, client, f)
	if sig := interrupted(); sig != nil {
		if lease != nil {
			uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
			lease.Unlock(uctx)
			cancel()
		}
		return interruptCode(e, sig, fmt.Sprintf("while waiting for lock %q on %s", f.name, client))
	}
	if err != nil {
		return f.acquireFailed(e, client, err)
	}
	code = runHolding(e, f, lease, cmd, url, sigs)
	return unlockAfter(e, f, lease, cmd, code)
}

// check refuses bad flags and a missing command with a usage error, and
// sets f.name (from the first argument unless --name was given) and
// f.argv; ok is false with the exit code when it refuses. withCommand
// says whether the command takes one.
func (f *runFlags) check(e *env, cmd string, args []string, withCommand bool) (code int, ok bool) {
	if !f.isSet("name") {
		if f.dashes && len(args) > 0 {
			return usageError(e, lookup(cmd), "--name is required when the command follows -- at once; or give NAME before --"), false
		}
		if len(args) == 0 {
			return usageError(e, lookup(cmd), "no lock name: give it as the first argument (or with --name)"), false
		}
		f.name, args, f.flock = args[0], args[1:], cmd == "run"
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	} else if len(args) > 0 && (args[0] == "-c" || args[0] == "--command") && f.flock {
		// flock's place for -c: after the file.
		if len(args) != 2 {
			return f.usage(e, cmd, "-c requires exactly one command argument"), false
		}
		f.command, args = args[1], nil
		if f.command == "" {
			return f.usage(e, cmd, "-c requires exactly one command argument"), false
		}
	}
	switch {
	case f.conflict.err != nil:
		return f.usage(e, cmd, "-E: %v", f.conflict.err), false
	case f.waitErr != nil:
		return f.usage(e, cmd, "--wait: %v", f.waitErr), false
	case f.nonblock && f.wait.set:
		return f.usage(e, cmd, "-n and -w together: -n fails at once, -w waits; give one"), false
	case withCommand && f.command != "" && len(args) > 0:
		return f.usage(e, cmd, "-c requires exactly one command argument; %q follows it", args), false
	case withCommand && f.command == "" && len(args) == 0 && f.flock:
		return f.usage(e, cmd, "no command to run after %q; dlock has no form of flock's file-descriptor locks", f.name), false
	case withCommand && f.command == "" && len(args) == 0:
		return f.usage(e, cmd, "no command to run; give it after --"), false
	case !withCommand && (len(args) > 0 || f.command != ""):
		return f.usage(e, cmd, "unexpected arguments %q", args), false
	case f.wait.d < 0:
		return f.usage(e, cmd, "--wait %v is negative", f.wait.d), false
	case f.minHold.d < 0:
		return f.usage(e, cmd, "--min-hold %v is negative", f.minHold.d), false
	case f.grace.d < 0:
		return f.usage(e, cmd, "--grace %v is negative", f.grace.d), false
	case f.limit < 0 || (f.isSet("limit") && f.limit == 0):
		return f.usage(e, cmd, "--limit %d: a semaphore has at least 1 permit", f.limit), false
	case f.limit > 0 && f.mode != "":
		return f.usage(e, cmd, "--limit and -s/-x together: a name is either a semaphore or a read-write lock"), false
	}
	if f.nonblock {
		f.wait = optDuration{d: 0, set: true}
	}
	f.argv = args
	if f.command != "" {
		f.argv = shellCommand(e.getenv, f.command)
	}
	return 0, true
}

// lockOptions are the lock's options that the flags set.
func (f *runFlags) lockOptions() []dlock.Option {
	mopts := []dlock.Option{}
	if f.ttl.set {
		mopts = append(mopts, dlock.TTL(f.ttl.d))
	}
	if f.minHold.d > 0 {
		mopts = append(mopts, dlock.MinHold(f.minHold.d))
	}
	if f.isSet("owner") {
		mopts = append(mopts, dlock.Owner(f.owner))
	}
	if f.fair {
		mopts = append(mopts, dlock.Fair())
	}
	return mopts
}

// locker returns the lock the flags ask for: a mutex, unless --limit
// (a semaphore's permit) or -s/-x (a read-write lock's side).
func (f *runFlags) locker(c *dlock.Client, opts []dlock.Option) locker {
	switch {
	case f.elect:
		el := c.Election(f.name, opts...)
		return locker{fmt.Sprintf("leadership of election %q", f.name), func(ctx context.Context) (*dlock.Lease, error) { return el.Campaign(ctx, f.value) }, nil}
	case f.limit > 0:
		s := c.Semaphore(f.name, f.limit, opts...)
		return locker{fmt.Sprintf("a permit of semaphore %q (of %d)", f.name, f.limit), s.Acquire, s.TryAcquire}
	case f.mode == "shared":
		rw := c.RWMutex(f.name, opts...)
		return locker{fmt.Sprintf("a read lock of %q", f.name), rw.RLock, rw.TryRLock}
	case f.mode == "exclusive":
		rw := c.RWMutex(f.name, opts...)
		return locker{fmt.Sprintf("the write lock of %q", f.name), rw.Lock, rw.TryLock}
	}
	m := c.Mutex(f.name, opts...)
	return locker{fmt.Sprintf("lock %q", f.name), m.Lock, m.TryLock}
}

// acquireFailed reports a failed acquisition and returns the exit code:
// a busy lock is the conflict code, silent under flock's conventions off
// a terminal (flock's own line with --verbose).
func (f *runFlags) acquireFailed(e *env, c *dlock.Client, err error) int {
	code := errorCode(err)
	if code != exitBusy {
		e.errorf("%v", err)
		if errors.Is(err, errors.ErrUnsupported) && errors.Is(err, dlock.ErrInvalidOption) {
			e.errorf("the %s backend cannot hold this kind of lock; use one that can ('dlock help run')", c)
		}
		return code
	}
	switch {
	case f.flock && f.verbose && f.wait.set && f.wait.d == 0:
		e.errorf("failed to get lock")
	case f.flock && f.verbose:
		e.errorf("timeout while waiting to get lock")
	}
	if !f.silentWhenBusy(e) {
		e.errorf("%v", err)
	}
	return f.conflictCode()
}

// startFailureCode is the exit code of a command that cannot be started:
// flock's 69 under its conventions, else the shell's 127 or 126.
func (f *runFlags) startFailureCode(err error) int {
	if f.flock {
		return flockNoExec
	}
	return startFailureCode(err)
}

// findCommand returns the command to run, or why it cannot be run.
func findCommand(args []string) (*exec.Cmd, error) {
	cmd := exec.Command(args[0], args[1:]...)
	if cmd.Err == nil && strings.ContainsRune(args[0], filepath.Separator) {
		// exec.Command looks up bare names only.
		_, cmd.Err = exec.LookPath(args[0])
	}
	return cmd, cmd.Err
}

// notifyForwarded returns a channel of the signals dlock passes on to the
// command. Signals that dlock was started with ignored (SIGHUP under
// nohup, SIGINT for a background job of a script) stay ignored, by dlock
// and by the command, which inherits that.
func notifyForwarded() chan os.Signal {
	sigs := make(chan os.Signal, 8)
	for _, sig := range forwarded {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	return sigs
}

// unlockAfter releases lease after the command ended with exit code code
// and returns dlock's exit code: code, exitLost if the release finds the
// lock taken over, or exitRelease if the release failed after the command
// succeeded (a failed command keeps its own code; the message says it).
func unlockAfter(e *env, f *runFlags, lease *dlock.Lease, cmd *exec.Cmd, code int) int {
	timeout := unlockTimeout
	if code == exitLost {
		timeout = lostUnlockTimeout
	}
	uctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := lease.Unlock(uctx); err != nil && code != exitLost {
		if errors.Is(err, dlock.ErrLeaseLost) {
			// The store gave the lock away although the lease's deadline
			// had not passed (the row was taken over, the server's clock
			// jumped): the hold was not continuous, whatever the command
			// did.
			e.errorf("%v", err)
			e.errorf("lost lock %q before %s's release: the lock may not have been held while %s ran (exit status 4)", f.name, cmd.Args[0], cmd.Args[0])
			return exitLost
		}
		// The lease was valid when the command exited, but the lock stays
		// held until its TTL runs out: not a clean success.
		e.errorf("%v", err)
		if code == exitOK {
			e.errorf("releasing lock %q failed after %s succeeded; the lock frees when its TTL runs out (exit status %d)", f.name, cmd.Args[0], exitRelease)
			return exitRelease
		}
		e.errorf("releasing lock %q failed after %s exited with status %d (kept); the lock frees when its TTL runs out", f.name, cmd.Args[0], code)
	}
	return code
}

// acquire takes the lock as --wait says, telling a person on stderr
// what it waits for (see waitReport).
func acquire(ctx context.Context, e *env, c *dlock.Client, f *runFlags, extra ...dlock.Option) (*dlock.Lease, error) {
	holders := make(chan dlock.Holder, 1) // the last holder seen while waiting
	remember := func(h dlock.Holder) {
		select {
		case <-holders:
		default:
		}
		holders <- h
	}
	start := time.Now()
	lk := f.locker(c, nil)
	report := newWaitReport(e.stderr, isTerminal(e.stderr) && !f.quiet, f.silentWhenBusy(e), f.quiet, fmt.Sprintf("%s on %s", lk.kind, c))
	defer report.end()
	onWait := func(h dlock.Holder) {
		report.onWait(h)
		remember(h)
	}
	lk = f.locker(c, append(append(f.lockOptions(), extra...), dlock.OnWait(onWait)))
	l, err := acquireWith(ctx, f, lk, remember, holders)
	if err == nil && f.verbose {
		el := time.Since(start)
		e.errorf("getting lock took %d.%06d seconds", el/time.Second, (el%time.Second)/time.Microsecond)
	}
	return l, err
}

func acquireWith(ctx context.Context, f *runFlags, lk locker, remember func(dlock.Holder), holders chan dlock.Holder) (*dlock.Lease, error) {
	if !f.wait.set || lk.try == nil {
		if f.wait.set {
			wctx, cancel := context.WithTimeout(ctx, f.wait.d)
			defer cancel()
			ctx = wctx
		}
		return lk.lock(ctx)
	}
	// As flock -w: one attempt first, whatever --wait (a 1ms --wait must
	// not fail on a free lock because the deadline cut the attempt short);
	// the attempt is bounded by the backend's request timeout and by
	// signals, not by --wait.
	start := time.Now()
	l, err := lk.try(ctx)
	if f.wait.d == 0 || !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrBackendUnavailable) {
		return l, err
	}
	var held *dlock.HeldError
	if errors.As(err, &held) {
		remember(held.Holder)
	}
	if rest := f.wait.d - time.Since(start); rest > 0 {
		wctx, cancel := context.WithTimeout(ctx, rest)
		defer cancel()
		l, err = lk.lock(wctx)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) ||
			errors.Is(err, dlock.ErrBackendUnavailable) || ctx.Err() != nil {
			return l, err
		}
	}
	var de *dlock.Error
	if errors.As(err, &de) && errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrBackendUnavailable) {
		// Say who held it rather than "context deadline exceeded".
		cause := fmt.Errorf("gave up after --wait %v", f.wait.d)
		select {
		case h := <-holders:
			h.TTL = 0 // as seen when the wait began; stale now
			cause = fmt.Errorf("%w; %w", cause, &dlock.HeldError{Holder: h})
		default:
		}
		err = &dlock.Error{Op: de.Op, Name: de.Name, Backend: de.Backend, Kind: dlock.ErrNotAcquired, Err: cause}
	}
	return nil, err
}

// interruptible returns a context that is cancelled when a signal arrives
// on sigs, and a function that stops watching sigs and returns the signal
// that arrived, or nil. After it, sigs is the caller's again.
func interruptible(ctx context.Context, sigs <-chan os.Signal) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	var got os.Signal
	go func() {
		defer close(done)
		select {
		case got = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	var once sync.Once
	return ctx, func() os.Signal {
		once.Do(func() { close(stop) })
		<-done
		return got
	}
}

// interruptCode reports that dlock was interrupted by sig and returns its
// exit code.
func interruptCode(e *env, sig os.Signal, while string) int {
	e.errorf("interrupted by signal %d (%v) %s", signalNumber(sig), sig, while)
	return exitSignalled + signalNumber(sig)
}

// describeHolder says who holds a lock for the waiting message.
func describeHolder(h dlock.Holder) string {
	s := fmt.Sprintf("held by %q", h.Owner)
	switch {
	case h.Token != 0 && h.TTL > 0:
		s += fmt.Sprintf(" (token %d, expires in %v unless renewed)", h.Token, h.TTL.Round(100*time.Millisecond))
	case h.Token != 0:
		s += fmt.Sprintf(" (token %d)", h.Token)
	case h.TTL > 0:
		s += fmt.Sprintf(" (expires in %v unless renewed)", h.TTL.Round(100*time.Millisecond))
	}
	return s
}

// runHolding runs cmd while lease is held and returns dlock's exit code.
func runHolding(e *env, f *runFlags, lease *dlock.Lease, cmd *exec.Cmd, url string, sigs <-chan os.Signal) int {
	cmd.Env = append(os.Environ(),
		"DLOCK_NAME="+lease.Name(),
		"DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DLOCK_OWNER="+lease.Owner(),
		"DLOCK_URL="+redact.Strip(url), // the secrets stay with dlock
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if err := lease.Err(); err != nil {
		e.errorf("%v", err)
		e.errorf("lost lock %q before %s could be started", f.name, cmd.Args[0])
		return exitLost
	}
	// The command's parent-death signal is tied to this thread (see
	// startChild).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if f.verbose {
		e.errorf("executing %s", cmd.Args[0])
	}
	ch, err := startChild(cmd)
	if err != nil {
		e.errorf("cannot run %q: %v", cmd.Args[0], err)
		return f.startFailureCode(err)
	}
	name := cmd.Args[0]

	var lost error // why the lease was lost while the command ran
	var killAt <-chan time.Time
	var graceEnd time.Time
	onLoss := func(err error) {
		lost = err
		e.errorf("%v", err)
		e.errorf("lost lock %q while %s was running; sending SIGTERM to its process group, SIGKILL in %v", f.name, name, f.grace.d)
		ch.terminate()
		graceEnd = time.Now().Add(f.grace.d)
		killAt = time.After(f.grace.d)
	}
	leaseDone := lease.Done()
wait:
	for {
		select {
		case <-ch.done:
			break wait
		case sig := <-sigs:
			ch.signal(sig)
		case <-leaseDone:
			leaseDone = nil
			onLoss(lease.Err())
		case <-killAt:
			killAt = nil
			e.errorf("%s did not exit within --grace %v; sending SIGKILL to its process group", name, f.grace.d)
			ch.kill()
		}
	}
	ch.standDown()
	if lost == nil {
		if err := lease.Err(); err != nil {
			// Lost as the command exited: it cannot be told whether the
			// command's last actions were covered.
			lost = err
			e.errorf("%v", err)
			e.errorf("lost lock %q as %s exited", f.name, name)
		}
	} else if killAt != nil {
		// The leader is gone; give what is left of its group the rest of
		// the grace period, then kill it.
		for ch.groupAlive() && time.Now().Before(graceEnd) {
			time.Sleep(20 * time.Millisecond)
		}
		if ch.groupAlive() {
			ch.kill()
		}
	}
	if lost != nil {
		e.errorf("%s %s after lock %q was lost (exit status 4)", name, ch.describe(), f.name)
		return exitLost
	}
	return ch.exitCode()
}

// startFailureCode is the exit code for a command that cannot be started:
// 127 if it does not exist, 126 otherwise, as shells do.
func startFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrDot) {
		return exitNotFound
	}
	return exitNoExec
}

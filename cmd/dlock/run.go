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
		synopsis: "dlock run [--url URL] [--connect-timeout D] --name NAME [--ttl D] [--wait D] [--owner ID] [--fair] [--grace D] -- COMMAND [ARG...]",
		usage:    runUsage,
		flags:    runFlagSet,
		order:    []string{"url URL", "connect-timeout D", "name NAME", "ttl D", "wait D", "owner ID", "fair", "grace D", "verbose"},
		run:      runRun,
		args:     true,
	})
}

const runUsage = `Usage: dlock run [flags] --name NAME -- COMMAND [ARG...]

Run COMMAND while holding the lock NAME, like flock(1) across machines.

dlock waits for the lock (for as long as it takes, as flock does, unless
--wait says otherwise), runs COMMAND holding it, and releases it when COMMAND
exits. While it waits it says on stderr who holds the lock, and again when
the holder changes. The lease is renewed every TTL/3 while COMMAND runs.

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
  3       the lock is busy: not acquired within --wait
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
  126     COMMAND cannot be executed (e.g. permission denied)
  127     COMMAND was not found
  dlock writes a message on stderr for each code of its own, so a COMMAND
  that exits 2-7 itself can be told apart by the absence of one.

Examples:
  dlock run --name nightly -- ./job.sh              wait for the lock, then run
  dlock run --name nightly --wait 0 -- ./job.sh     exit 3 at once if it is held
  dlock run --name nightly --wait 5m --ttl 10s -- make deploy
`

// runFlags are the flags of dlock run.
type runFlags struct {
	backendFlags
	fs    *flag.FlagSet
	name  string
	ttl   optDuration
	wait  optDuration
	owner string
	fair  bool
	grace optDuration
}

func runFlagSet(fs *flag.FlagSet) any {
	f := &runFlags{fs: fs, grace: optDuration{d: defaultGrace}}
	f.define(fs, "log the library's renewal errors and other details")
	fs.StringVar(&f.name, "name", "", "the lock's name: 1-255 bytes of UTF-8 without NUL (required)")
	fs.Var(&f.ttl, "ttl", "lease time to live: how long the backend keeps the lock\nafter dlock stops renewing it, e.g. dies (default 30s,\nminimum 100ms)")
	fs.Var(&f.wait, "wait", "how long to wait for the lock; without --wait, as long as\nit takes (like flock); 0: not at all, exit 3 if it is held\n(like flock -n); D: at most D, then exit 3 (like flock -w D)")
	fs.StringVar(&f.owner, "owner", "", "explicit owner id: another dlock run with the same owner\nre-enters the lock while this one holds it (nested holds,\nsame token); default: a fresh random id per run")
	fs.BoolVar(&f.fair, "fair", false, "acquire in arrival order among fair waiters")
	fs.Var(&f.grace, "grace", "after SIGTERM on a lost lease, how long to wait before\nSIGKILL (default 10s)")
	return f
}

func (f *runFlags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

func runRun(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*runFlags)
	if code, ok := f.check(e, args); !ok {
		return code
	}
	// Find the command before taking the lock.
	cmd, err := findCommand(args)
	if err != nil {
		e.errorf("cannot run %q: %v", args[0], err)
		return startFailureCode(err)
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

	lease, err := acquire(ictx, e, client, f, f.mutexOptions())
	if sig := interrupted(); sig != nil {
		if lease != nil {
			uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
			lease.Unlock(uctx)
			cancel()
		}
		return interruptCode(e, sig, fmt.Sprintf("while waiting for lock %q on %s", f.name, client))
	}
	if err != nil {
		e.errorf("%v", err)
		return errorCode(err)
	}
	code = runHolding(e, f, lease, cmd, url, sigs)
	return unlockAfter(e, f, lease, cmd, code)
}

// check refuses bad flags and a missing command with a usage error; ok is
// false with the exit code when it does.
func (f *runFlags) check(e *env, args []string) (code int, ok bool) {
	c := lookup("run")
	switch {
	case !f.isSet("name"):
		return usageError(e, c, "--name is required"), false
	case len(args) == 0:
		return usageError(e, c, "no command to run; give it after --"), false
	case f.wait.d < 0:
		return usageError(e, c, "--wait %v is negative", f.wait.d), false
	case f.grace.d < 0:
		return usageError(e, c, "--grace %v is negative", f.grace.d), false
	}
	return 0, true
}

// mutexOptions are the lock's options that the flags set.
func (f *runFlags) mutexOptions() []dlock.Option {
	mopts := []dlock.Option{}
	if f.ttl.set {
		mopts = append(mopts, dlock.TTL(f.ttl.d))
	}
	if f.isSet("owner") {
		mopts = append(mopts, dlock.Owner(f.owner))
	}
	if f.fair {
		mopts = append(mopts, dlock.Fair())
	}
	return mopts
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

// acquire takes the lock as --wait says.
func acquire(ctx context.Context, e *env, c *dlock.Client, f *runFlags, mopts []dlock.Option) (*dlock.Lease, error) {
	holders := make(chan dlock.Holder, 1) // the last holder seen while waiting
	remember := func(h dlock.Holder) {
		select {
		case <-holders:
		default:
		}
		holders <- h
	}
	onWait := func(h dlock.Holder) {
		e.errorf("waiting for lock %q on %s: %s", f.name, c, describeHolder(h))
		remember(h)
	}
	m := c.Mutex(f.name, append(mopts, dlock.OnWait(onWait))...)
	if !f.wait.set {
		return m.Lock(ctx)
	}
	// As flock -w: one attempt first, whatever --wait (a 1ms --wait must
	// not fail on a free lock because the deadline cut the attempt short);
	// the attempt is bounded by the backend's request timeout and by
	// signals, not by --wait.
	start := time.Now()
	l, err := m.TryLock(ctx)
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
		l, err = m.Lock(wctx)
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
	ch, err := startChild(cmd)
	if err != nil {
		e.errorf("cannot run %q: %v", cmd.Args[0], err)
		return startFailureCode(err)
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

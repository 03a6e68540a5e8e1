package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

func init() {
	commands = append(commands, &command{
		name:     "hold",
		synopsis: "dlock hold [flags] NAME",
		usage:    holdUsage,
		flags:    runFlagSet,
		order:    []string{"url URL", "connect-timeout D", "n|nb|nonblock|nonblocking", "w|wait|timeout D", "E|conflict-exit-code N", "s|shared", "x|e|exclusive", "limit N", "ttl D", "owner ID", "fair", "quiet", "verbose"},
		run:      runHold,
		args:     true,
	}, &command{
		name:     "release",
		synopsis: "dlock release --force [--yes] [--url URL] NAME",
		usage:    releaseUsage,
		flags:    releaseFlagSet,
		order:    []string{"force", "yes", "url URL", "connect-timeout D", "verbose"},
		run:      runRelease,
		args:     true,
	})
}

const holdUsage = `Usage: dlock hold [flags] NAME

Take the lock NAME, print its fencing token on stdout, and hold it until
interrupted (Ctrl-C, SIGTERM, SIGHUP), renewing the lease meanwhile; then
release it and exit 0. Like etcdctl lock NAME: for holding a lock by hand
while you work. The lock is a mutex unless --limit, -s or -x says otherwise
(see 'dlock help run').

Flags:
%FLAGS%
Exit status:
  0  the lock was held until interrupted, and released
  2  configuration error (bad flag, URL or name)
  3  the lock is busy: not acquired within --wait (-E N: N instead)
  4  the lease was lost while held (the backend gave the lock away, or
     'dlock release --force' released it)
  5  backend error
  7  the release failed: the lock stays until its TTL runs out

Example:
  dlock hold deploy          prints the token, holds until Ctrl-C
`

func runHold(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*runFlags)
	if code, ok := f.check(e, "hold", args, false); !ok {
		return code
	}
	sigs := notifyForwarded()
	defer signal.Stop(sigs)
	ictx, interrupted := interruptible(ctx, sigs)
	client, _, code := f.open(ictx, e, "hold")
	if client == nil {
		interrupted()
		return code
	}
	defer client.Close()
	lease, err := acquire(ictx, e, client, f)
	if sig := interrupted(); sig != nil {
		if lease != nil {
			lease.Unlock(context.Background())
		}
		return interruptCode(e, sig, fmt.Sprintf("while waiting for lock %q on %s", f.name, client))
	}
	if err != nil {
		return f.acquireFailed(e, client, err)
	}
	fmt.Fprintln(e.stdout, lease.Token())
	if !f.quiet {
		e.errorf("holding lock %q on %s with token %d until interrupted", f.name, client, lease.Token())
	}
	select {
	case <-sigs:
	case <-lease.Done():
		e.errorf("%v", lease.Err())
		e.errorf("lost lock %q while holding it (exit status 4)", f.name)
		return exitLost
	}
	uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	if err := lease.Unlock(uctx); err != nil {
		e.errorf("%v", err)
		if errors.Is(err, dlock.ErrLeaseLost) {
			return exitLost
		}
		return exitRelease
	}
	return exitOK
}

const releaseUsage = `Usage: dlock release --force [--yes] [flags] NAME

Release the lock NAME held by someone else, for a lock that is stuck (its
holder hung, its lease too long to wait out). It says who holds NAME and
asks for confirmation on stdin unless --yes. The holder's lease is lost:
its next renewal fails, and dlock run's command is terminated. Its token can
never be granted again: the next grant of NAME gets a higher one, so a
resource that checks tokens rejects the old holder's late writes.
A name with several holders (a semaphore, a read-write lock's readers) has
each of them released. --force is required: releasing someone else's lock
is not an everyday act.

Flags:
%FLAGS%
Exit status:
  0  released
  1  nothing released: NAME is free (or does not exist), or the
     confirmation was not given
  2  configuration error, or no --force
  5  backend error
  6  NAME's record holds data dlock did not write: not released
`

type releaseFlags struct {
	backendFlags
	force, yes bool
}

func releaseFlagSet(fs *flag.FlagSet) any {
	f := &releaseFlags{}
	f.define(fs, "log the library's details on stderr")
	fs.BoolVar(&f.force, "force", false, "release another owner's hold (required)")
	fs.BoolVar(&f.yes, "yes", false, "do not ask for confirmation")
	return f
}

func runRelease(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*releaseFlags)
	c := lookup("release")
	switch {
	case len(args) != 1:
		return usageError(e, c, "give one lock NAME")
	case !f.force:
		return usageError(e, c, "--force is required: it releases another owner's lock")
	}
	name := args[0]
	client, _, code := f.open(ctx, e, "release")
	if client == nil {
		return code
	}
	defer client.Close()
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	infos, err := client.Inspect(ictx, name)
	if err != nil {
		e.errorf("%v", err)
		if errors.Is(err, errors.ErrUnsupported) {
			return exitFailure
		}
		return errorCode(err)
	}
	var holders []dlock.LockInfo
	for _, in := range infos {
		if in.Name == name && in.Namespace == "" {
			holders = append(holders, in)
		}
	}
	if len(holders) == 0 {
		e.errorf("lock %q on %s is not held; nothing released", name, client)
		return exitFailure
	}
	for _, h := range holders {
		if h.Bad != "" {
			e.errorf("lock %q on %s holds data dlock did not write (%s); nothing released", name, client, h.Bad)
			return exitForeign
		}
	}
	for _, h := range holders {
		e.errorf("lock %q on %s is held by %s", name, client, describeInfo(h))
	}
	if !f.yes {
		fmt.Fprintf(e.stderr, "Release it? Its holder loses the lease and the next grant gets a higher token. [y/N] ")
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			e.errorf("not confirmed; nothing released")
			return exitFailure
		}
	}
	b := client.Backend()
	for _, h := range holders {
		hold := dlock.Hold{Name: h.Name, Owner: h.Owner, Token: h.Token, Kind: h.Kind}
		// One Release per reentrant hold: the count lives in the store.
		for i := 0; i < max(h.Count, 1); i++ {
			rctx, cancel := context.WithTimeout(ctx, unlockTimeout)
			err := b.Release(rctx, hold)
			cancel()
			if errors.Is(err, dlock.ErrLeaseLost) && i > 0 {
				break // gone meanwhile: released
			}
			if err != nil {
				e.errorf("releasing lock %q on %s held by %q (token %d): %v", name, client, h.Owner, h.Token, err)
				return errorCode(err)
			}
		}
		e.errorf("released lock %q on %s held by %q (token %d); the next grant's token is higher", name, client, h.Owner, h.Token)
	}
	return exitOK
}

// describeInfo says who a holder is, for release and leader.
func describeInfo(in dlock.LockInfo) string {
	s := fmt.Sprintf("%q (token %d", in.Owner, in.Token)
	if in.Kind != dlock.KindMutex {
		s += ", " + dlock.Shape(in.Kind, in.Limit)
		if in.Weight > 0 && in.Kind != dlock.KindElection {
			s += fmt.Sprintf(", weight %d", in.Weight)
		}
	}
	if in.Count > 1 {
		s += fmt.Sprintf(", %d holds", in.Count)
	}
	if in.TTL > 0 {
		s += fmt.Sprintf(", expires in %v unless renewed", in.TTL.Round(100*time.Millisecond))
	}
	return s + ")"
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/dlock-dev/dlock"
)

func init() {
	commands = append(commands, &command{
		name:     "elect",
		synopsis: "dlock elect [--url URL] [--value V] [--ttl D] [--wait D] [--grace D] NAME [--] COMMAND [ARG...]",
		usage:    electUsage,
		flags:    electFlagSet,
		order:    []string{"url URL", "connect-timeout D", "value V", "w|wait|timeout D", "ttl D", "owner ID", "grace D", "quiet", "verbose"},
		run:      runRun,
		args:     true,
	}, &command{
		name:     "leader",
		synopsis: "dlock leader [--url URL] [--json] [--watch] NAME",
		usage:    leaderUsage,
		flags:    leaderFlagSet,
		order:    []string{"url URL", "connect-timeout D", "json", "watch", "verbose"},
		run:      runLeader,
		args:     true,
	})
}

const electUsage = `Usage: dlock elect [flags] NAME [--] COMMAND [ARG...]

Campaign in the election NAME, publishing --value (default: host/pid),
and run COMMAND while this process leads. Candidates lead in the order they
campaigned. COMMAND finds the term (the lease's fencing token, higher for
every new leader) in DLOCK_TOKEN, and DLOCK_NAME, DLOCK_OWNER and DLOCK_URL
as under dlock run. If leadership is lost, COMMAND's process group gets
SIGTERM, then SIGKILL after --grace, and dlock exits 4, as dlock run does;
when COMMAND exits, dlock resigns and exits with COMMAND's status.

Flags:
%FLAGS%
Exit status: as dlock run with --name ('dlock help run'): COMMAND's own, 2
for a bad flag or a backend that cannot hold elections, 3 not elected within
--wait, 4 leadership lost, 5 backend error.

Example:
  dlock elect scheduler --value "$(hostname)" -- ./scheduler
`

func electFlagSet(fs *flag.FlagSet) any {
	f := runFlagSet(fs).(*runFlags)
	f.elect = true
	fs.StringVar(&f.value, "value", "", "what the leader publishes (1-4096 bytes; default: host/pid)")
	return f
}

const leaderUsage = `Usage: dlock leader [flags] NAME

Print the leader of the election NAME: its owner id, published value and
term, as "owner=... value=... term=N", or "no leader". --json prints an
object {"name", "owner", "value", "term"} (owner "" for no leader). --watch
follows the leader until interrupted, a line (or object) per change: a new
leader, a new value, or no leader.

Flags:
%FLAGS%
Exit status: 0 with a leader (with --watch: until interrupted), 1 no leader,
2 a bad flag or a name in use as another kind, 5 backend error.

Example:
  dlock leader scheduler --watch
`

type leaderFlags struct {
	backendFlags
	json, watch bool
}

func leaderFlagSet(fs *flag.FlagSet) any {
	f := &leaderFlags{}
	f.define(fs, "log the library's details on stderr")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	fs.BoolVar(&f.watch, "watch", false, "follow changes, a line per change, until interrupted")
	return f
}

func runLeader(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*leaderFlags)
	if len(args) != 1 {
		return usageError(e, lookup("leader"), "give one election NAME")
	}
	client, _, code := f.open(ctx, e, "leader")
	if client == nil {
		return code
	}
	defer client.Close()
	el := client.Election(args[0])
	print := func(ld dlock.Leader) {
		if f.json {
			b, _ := json.Marshal(struct {
				Name  string `json:"name"`
				Owner string `json:"owner"`
				Value string `json:"value"`
				Term  uint64 `json:"term"`
			}{args[0], ld.Owner, ld.Value, ld.Term})
			fmt.Fprintf(e.stdout, "%s\n", b)
			return
		}
		if ld.Owner == "" {
			fmt.Fprintln(e.stdout, "no leader")
			return
		}
		fmt.Fprintf(e.stdout, "owner=%s value=%s term=%d\n", cell(ld.Owner), cell(ld.Value), ld.Term)
	}
	if !f.watch {
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		ld, err := el.Leader(ictx)
		if errors.Is(err, dlock.ErrNoLeader) {
			print(dlock.Leader{})
			return exitFailure
		}
		if err != nil {
			e.errorf("%v", err)
			return errorCode(err)
		}
		print(ld)
		return exitOK
	}
	sigs := make(chan os.Signal, 1)
	for _, s := range forwarded {
		signal.Notify(sigs, s)
	}
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := el.Observe(ctx)
	for {
		select {
		case <-sigs:
			cancel()
			for range obs {
			}
			return exitOK
		case ld, ok := <-obs:
			if !ok {
				return exitOK
			}
			if ld.Err != nil {
				e.errorf("%v", ld.Err)
				if errors.Is(ld.Err, dlock.ErrInvalidOption) {
					return exitUsage
				}
				continue
			}
			print(ld)
		}
	}
}

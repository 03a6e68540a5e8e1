package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/dlock-dev/dlock"
)

// inspectTimeout bounds dlock status's request to the backend.
const inspectTimeout = 30 * time.Second

func init() {
	commands = append(commands, &command{
		name:     "status",
		synopsis: "dlock status [--url URL] [--connect-timeout D] [--prefix P]",
		usage:    statusUsage,
		flags:    statusFlagSet,
		order:    []string{"url URL", "connect-timeout D", "prefix P", "verbose"},
		run:      runStatus,
	})
}

const statusUsage = `Usage: dlock status [flags]

List the locks held on the backend, one per line, sorted by name:
  NAME        the lock's name
  OWNER       the holder's owner id (host/pid/random for dlock run, unless
              it was given --owner)
  TOKEN       the fencing token of the hold
  HOLDS       the reentry count
  EXPIRES IN  the lease left by the backend's clock if the holder stops renewing
  WAITERS     the processes waiting for the lock; "?" if the backend cannot
              tell (Redis and the SQL backends do not see waiters that
              are not --fair), "N+?" if it sees N --fair waiters and
              cannot tell about others
A lock whose record in the store holds data dlock did not write (a row,
key or node it cannot read or would have to corrupt to use) is listed
with what could be read of it and a last column FOREIGN DATA saying what
is wrong; locking it fails until the record is removed or repaired.
With no lock held it prints nothing on stdout and says so on stderr.

` + backendUsage + `  0  the listing was printed
  1  the backend cannot list locks
  2  configuration error: a bad flag or URL, mem:// (a backend in dlock's
     own process, with no locks of other processes), or no home directory
     for the default database
  5  backend error: the backend cannot be opened or does not answer
  6  foreign data: the backend cannot be opened on what the store holds
     (a table of that name that is not dlock's)
`

type statusFlags struct {
	backendFlags
	prefix string
}

func statusFlagSet(fs *flag.FlagSet) any {
	f := &statusFlags{}
	f.define(fs, "log the library's details on stderr")
	fs.StringVar(&f.prefix, "prefix", "", "list only locks whose names start with P")
	return f
}

func runStatus(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*statusFlags)
	client, _, code := f.open(ctx, e, "status")
	if client == nil {
		return code
	}
	defer client.Close()

	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	infos, err := client.Inspect(ictx, f.prefix)
	if errors.Is(err, errors.ErrUnsupported) {
		e.errorf("status: the %s backend cannot list its locks", client)
		return exitFailure
	}
	if err != nil {
		e.errorf("%v", err)
		return errorCode(err)
	}
	if len(infos) == 0 {
		if f.prefix != "" {
			e.errorf("no locks held on %s with names starting with %q", client, f.prefix)
		} else {
			e.errorf("no locks held on %s", client)
		}
		return exitOK
	}
	slices.SortFunc(infos, func(a, b dlock.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	bad := 0
	for _, in := range infos {
		if in.Bad != "" {
			bad++
		}
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	header := "NAME\tOWNER\tTOKEN\tHOLDS\tEXPIRES IN\tWAITERS"
	if bad > 0 {
		header += "\tFOREIGN DATA"
	}
	fmt.Fprintln(tw, header)
	for _, in := range infos {
		expires := "?"
		if in.TTL > 0 {
			expires = in.TTL.Round(100 * time.Millisecond).String()
		}
		waiters := "?"
		switch {
		case in.Waiters >= 0:
			waiters = strconv.Itoa(in.Waiters)
		case in.Queued > 0:
			waiters = strconv.Itoa(in.Queued) + "+?"
		}
		row := fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s", nameCell(in), cell(in.Owner), in.Token, in.Count, expires, waiters)
		if in.Bad != "" {
			// The last column: spaces keep the others aligned.
			bad := in.Bad
			if strings.ContainsFunc(bad, func(r rune) bool { return !unicode.IsPrint(r) }) {
				bad = strconv.Quote(bad)
			}
			row += "\t" + bad
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		e.errorf("status: %v", err)
		return exitFailure
	}
	if bad > 0 {
		e.errorf("%d of the listed locks on %s hold data that dlock did not write (see FOREIGN DATA)", bad, client)
	}
	return exitOK
}

// nameCell shows a lock's name, with its namespace (dlock.Namespace) in
// brackets before it when it has one, so that "job" in namespace "app"
// does not look like the lock "job", nor like "app/job".
func nameCell(in dlock.LockInfo) string {
	if in.Namespace == "" {
		return cell(in.Name)
	}
	return "[" + cell(in.Namespace) + "]" + cell(in.Name)
}

// cell quotes s for a table cell if it is empty or has spaces or
// characters that are not printable, so that columns stay aligned.
func cell(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

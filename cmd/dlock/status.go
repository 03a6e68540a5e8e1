package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
		synopsis: "dlock status [--url URL] [--connect-timeout D] [--prefix P] [--json] [--watch] [NAME...]",
		usage:    statusUsage,
		flags:    statusFlagSet,
		order:    []string{"url URL", "connect-timeout D", "prefix P", "json", "watch", "verbose"},
		run:      runStatus,
		args:     true,
	})
}

const statusUsage = `Usage: dlock status [flags] [NAME...]

List the locks held on the backend (or the names given), one holder per
line, sorted by name; a name with several holders (a semaphore, the
readers of a read-write lock) has a line for each:
  NAME        the lock's name
  OWNER       the holder's owner id (host/pid/random for dlock run, unless
              it was given --owner)
  TOKEN       the fencing token of the hold
  KIND        mutex, semaphore, rwlock or election
  WEIGHT      what the holder holds of the name's limit: 1/1 for a mutex,
              1/4 for one permit of a semaphore of 4, read or write for a
              read-write lock
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
A VALUE column shows what an election's leader published, when one has.
With no lock held it prints nothing on stdout and says so on stderr.

--json prints a JSON array instead, an object per holder with the fields
name, namespace, owner, token, count, kind, limit, weight, value,
expires_in_ms (0 if unknown), waiters (-1 if unknown), queued, and, for a
record dlock did not write, "foreign": true and "foreign_data": what is
wrong.

--watch follows the listing until interrupted: on a terminal it redraws the
table in place at each change; otherwise it prints one line per change of a
name ("NAME: free", or "NAME: held by ..."), with --json one JSON object per
change. With NAMEs, the store's changes are pushed where the backend can;
without, the listing is read every second.

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
	prefix      string
	json, watch bool
}

func statusFlagSet(fs *flag.FlagSet) any {
	f := &statusFlags{}
	f.define(fs, "log the library's details on stderr")
	fs.StringVar(&f.prefix, "prefix", "", "list only locks whose names start with P")
	fs.BoolVar(&f.json, "json", false, "print JSON: an object per holder")
	fs.BoolVar(&f.watch, "watch", false, "follow changes until interrupted")
	return f
}

func runStatus(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*statusFlags)
	client, _, code := f.open(ctx, e, "status")
	if client == nil {
		return code
	}
	defer client.Close()
	if f.watch {
		return watchStatus(ctx, e, client, f, args)
	}
	infos, code := listLocks(ctx, e, client, f.prefix, args)
	if code != exitOK {
		return code
	}
	if f.json {
		return printJSON(e, infos)
	}
	if len(infos) == 0 {
		switch {
		case len(args) > 0:
			e.errorf("none of %q is held on %s", args, client)
		case f.prefix != "":
			e.errorf("no locks held on %s with names starting with %q", client, f.prefix)
		default:
			e.errorf("no locks held on %s", client)
		}
		return exitOK
	}
	if err := printTable(e.stdout, infos); err != nil {
		e.errorf("status: %v", err)
		return exitFailure
	}
	if bad := countBad(infos); bad > 0 {
		e.errorf("%d of the listed locks on %s hold data that dlock did not write (see FOREIGN DATA)", bad, client)
	}
	return exitOK
}

// listLocks returns the holders of the locks whose names start with
// prefix, or of names when given, sorted by name and token.
func listLocks(ctx context.Context, e *env, client *dlock.Client, prefix string, names []string) ([]dlock.LockInfo, int) {
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	infos, err := client.Inspect(ictx, prefix)
	if errors.Is(err, errors.ErrUnsupported) {
		e.errorf("status: the %s backend cannot list its locks", client)
		return nil, exitFailure
	}
	if err != nil {
		e.errorf("%v", err)
		return nil, errorCode(err)
	}
	if len(names) > 0 {
		infos = slices.DeleteFunc(infos, func(in dlock.LockInfo) bool { return !slices.Contains(names, in.Name) })
	}
	sortInfos(infos)
	return infos, exitOK
}

func sortInfos(infos []dlock.LockInfo) {
	slices.SortStableFunc(infos, func(a, b dlock.LockInfo) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

func countBad(infos []dlock.LockInfo) int {
	bad := 0
	for _, in := range infos {
		if in.Bad != "" {
			bad++
		}
	}
	return bad
}

// printTable writes the listing as an aligned table.
func printTable(w io.Writer, infos []dlock.LockInfo) error {
	bad := countBad(infos)
	values := slices.ContainsFunc(infos, func(in dlock.LockInfo) bool { return in.Value != "" })
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	header := "NAME\tOWNER\tTOKEN\tKIND\tWEIGHT\tHOLDS\tEXPIRES IN\tWAITERS"
	if values {
		header += "\tVALUE"
	}
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
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s", nameCell(in), cell(in.Owner), in.Token, kindName(in.Kind), weightCell(in), in.Count, expires, waiters)
		if values {
			v := "-" // not an election, or no value
			if in.Value != "" {
				v = cell(in.Value)
			}
			row += "\t" + v
		}
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
	return tw.Flush()
}

// kindName is a kind as the KIND column and JSON show it: one word.
func kindName(k dlock.Kind) string {
	if k == dlock.KindRWMutex {
		return "rwlock"
	}
	return k.String()
}

// weightCell is the WEIGHT column: weight/limit, or read and write for a
// read-write lock.
func weightCell(in dlock.LockInfo) string {
	switch {
	case in.Kind == dlock.KindMutex && in.Bad == "":
		return "1/1" // a backend that predates kinds leaves Weight 0
	case in.Kind == dlock.KindRWMutex && in.Weight == dlock.RWLimit:
		return "write"
	case in.Kind == dlock.KindRWMutex && in.Weight > 0:
		return "read"
	case in.Weight == 0 || in.Limit == 0:
		return "?"
	}
	return fmt.Sprintf("%d/%d", in.Weight, in.Limit)
}

// jsonInfo is a holder in status --json.
type jsonInfo struct {
	Name        string `json:"name"`
	Namespace   string `json:"namespace,omitempty"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	Count       int    `json:"count"`
	Kind        string `json:"kind"`
	Limit       int    `json:"limit"`
	Weight      int    `json:"weight"`
	Value       string `json:"value,omitempty"`
	ExpiresInMS int64  `json:"expires_in_ms"`
	Waiters     int    `json:"waiters"`
	Queued      int    `json:"queued"`
	Foreign     bool   `json:"foreign,omitempty"`
	ForeignData string `json:"foreign_data,omitempty"`
}

func toJSON(in dlock.LockInfo) jsonInfo {
	return jsonInfo{Name: in.Name, Namespace: in.Namespace, Owner: in.Owner, Token: in.Token, Count: in.Count,
		Kind: kindName(in.Kind), Limit: in.Limit, Weight: in.Weight, Value: in.Value, ExpiresInMS: in.TTL.Milliseconds(),
		Waiters: in.Waiters, Queued: in.Queued, Foreign: in.Bad != "", ForeignData: in.Bad}
}

func printJSON(e *env, infos []dlock.LockInfo) int {
	out := make([]jsonInfo, 0, len(infos))
	for _, in := range infos {
		out = append(out, toJSON(in))
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		e.errorf("status: %v", err)
		return exitFailure
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

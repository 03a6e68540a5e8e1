package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// Exit codes of dlock's own outcomes; see the package documentation.
const (
	exitOK        = 0
	exitFailure   = 1   // a failure with no code of its own (status: cannot list)
	exitUsage     = 2   // configuration error: bad flags, URL, name, owner or TTL, no home
	exitBusy      = 3   // not acquired within --wait
	exitLost      = 4   // the lock was not held throughout the command's run
	exitBackend   = 5   // the backend cannot be opened or does not answer
	exitForeign   = 6   // the store holds data dlock did not write where the lock's state goes
	exitRelease   = 7   // the command succeeded but the release failed: the lock stays until its TTL
	exitNoExec    = 126 // the command cannot be executed
	exitNotFound  = 127 // the command was not found
	exitSignalled = 128 // plus the signal number
)

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == guardArg:
		os.Exit(runGuard())
	case len(os.Args) > 1 && os.Args[1] == gateArg:
		os.Exit(runGate(os.Args[2:]))
	}
	if code, ok := verifyWorker(); ok {
		os.Exit(code)
	}
	os.Exit(dlockMain(os.Args[1:], &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
	}))
}

// env is what a command gets from the process: its standard files and
// environment.
type env struct {
	stdin, stdout, stderr *os.File
	getenv                func(string) string
}

// errorf writes a message prefixed by "dlock: " (or the message of a
// library error, which has the prefix) on stderr.
func (e *env) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(msg, "dlock") {
		msg = "dlock: " + msg
	}
	fmt.Fprintln(e.stderr, msg)
}

// command is a subcommand of dlock.
type command struct {
	name     string
	synopsis string // one line for the overview
	usage    string // the text of "dlock help NAME", with the flags listed at %FLAGS%
	flags    func(*flag.FlagSet) any
	order    []string // the flags in the order of the help text: "name ARG", or "name" for a bool
	run      func(ctx context.Context, e *env, opts any, args []string) int
	args     bool // run takes arguments after the flags; without, any is a usage error
}

var commands []*command // filled by the init functions of run.go, status.go and migrate.go

// commandOrder is the order of the commands in the overview.
var commandOrder = []string{"run", "hold", "release", "elect", "leader", "status", "migrate", "verify", "bench", "version", "completion"}

// commandGroups are the overview's groups of commands, in order.
var commandGroups = []struct {
	title string
	names []string
}{
	{"Locks", []string{"run", "hold", "release"}},
	{"Leader election", []string{"elect", "leader"}},
	{"Looking at a store", []string{"status"}},
	{"Setting up and checking a store", []string{"migrate", "verify", "bench"}},
	{"This program", []string{"version", "completion", "help"}},
}

// commandSummary says what each command does, with an example, for the
// overview and shell completion.
var commandSummary = map[string]string{
	"run":        "run a command while holding a lock",
	"hold":       "take a lock, print its token, hold it until interrupted",
	"release":    "release a stuck lock held by someone else",
	"elect":      "run a command while this process leads an election",
	"leader":     "print an election's leader, value and term",
	"status":     "list the locks held on a backend, and their holders",
	"migrate":    "create the tables of an SQL backend ahead of first use",
	"verify":     "prove the lock's guarantees on a store under injected faults",
	"bench":      "measure a store with the standard workloads",
	"version":    "print dlock's version and VCS revision",
	"completion": "print a shell completion script (bash, zsh, fish)",
	"help":       "show this text, or a command's flags and exit codes",
}

// commandExample is an example of each command for the overview.
var commandExample = map[string]string{
	"run":        "dlock run -n /tmp/backup.lock ./backup.sh",
	"hold":       "dlock hold deploy",
	"release":    "dlock release --force deploy",
	"elect":      "dlock elect scheduler --value $(hostname) -- ./scheduler",
	"leader":     "dlock leader scheduler --watch",
	"status":     "dlock status --json",
	"migrate":    "dlock migrate --url postgres://db/locks",
	"verify":     "dlock verify --url redis://localhost:6379 --out /tmp/v",
	"bench":      "dlock bench --url redis://localhost:6379",
	"version":    "dlock version",
	"completion": "source <(dlock completion bash)",
	"help":       "dlock help run",
}

// sortCommands puts commands in commandOrder.
func sortCommands() {
	slices.SortStableFunc(commands, func(a, b *command) int {
		return slices.Index(commandOrder, a.name) - slices.Index(commandOrder, b.name)
	})
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func dlockMain(args []string, e *env) int {
	sortCommands()
	if len(args) == 0 {
		overview(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "--version", "-version", "-V":
		fmt.Fprintln(e.stdout, versionLine())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) == 1 || args[0] != "help" {
			overview(e.stdout)
			return exitOK
		}
		c := lookup(args[1])
		if c == nil || len(args) > 2 {
			e.errorf("help: unknown command %q; commands: %s", strings.Join(args[1:], " "), commandNames())
			return exitUsage
		}
		printUsage(e.stdout, c)
		return exitOK
	}
	c := lookup(args[0])
	if c == nil {
		e.errorf("unknown command %q; commands: %s (see 'dlock help')", args[0], commandNames())
		return exitUsage
	}
	fs := flag.NewFlagSet("dlock "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := c.flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(e.stdout, c)
			return exitOK
		}
		return usageError(e, c, "%v", err)
	}
	if d, ok := opts.(interface{ afterDashes(bool) }); ok {
		// Whether the arguments left follow "--", which the flag package
		// drops.
		n := len(args) - 1 - fs.NArg()
		d.afterDashes(n > 0 && args[n] == "--")
	}
	if !c.args && fs.NArg() > 0 {
		return usageError(e, c, "unexpected arguments %q", fs.Args())
	}
	rest, err := flagsAfterName(c, fs)
	if err != nil {
		return usageError(e, c, "%v", err)
	}
	return c.run(context.Background(), e, opts, rest)
}

// flagsAfterName parses the flags that follow the first argument, the
// name, as in `dlock elect NAME --value V -- CMD` or `dlock leader NAME
// --watch`, and returns the arguments left, with a "--" that ended the
// flags kept. dlock run is left alone: like flock(1), which stops at the
// first argument that is not an option, what follows its NAME is the
// command (only flock's -c has a place there, which run handles).
func flagsAfterName(c *command, fs *flag.FlagSet) ([]string, error) {
	rest := fs.Args()
	if c.name == "run" || len(rest) < 2 || rest[0] == "--" || !strings.HasPrefix(rest[1], "-") || rest[1] == "--" || rest[1] == "-" {
		return rest, nil
	}
	after := rest[1:]
	if err := fs.Parse(after); err != nil {
		return nil, err
	}
	out := []string{rest[0]}
	if n := len(after) - fs.NArg(); n > 0 && after[n-1] == "--" {
		out = append(out, "--")
	}
	return append(out, fs.Args()...), nil
}

// usageError reports a usage error of command c and returns exitUsage.
func usageError(e *env, c *command, format string, args ...any) int {
	e.errorf("%s: %s", c.name, fmt.Sprintf(format, args...))
	fmt.Fprintf(e.stderr, "usage: %s\nRun 'dlock help %s' for details.\n", c.synopsis, c.name)
	return exitUsage
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

func overview(w io.Writer) {
	fmt.Fprintf(w, `dlock runs programs under distributed locks, like flock(1) across machines.

Usage:
`)
	for _, c := range commands {
		// Wrapped lines hang under the first flag.
		fmt.Fprintf(w, "  %s\n", wrap(c.synopsis, 2+len("dlock ")+len(c.name)+1, helpWidth))
	}
	fmt.Fprintf(w, "  dlock help [COMMAND]\n")
	for _, g := range commandGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			if name != "help" && lookup(name) == nil {
				continue
			}
			fmt.Fprintf(w, "  %-10s  %s\n", name, commandSummary[name])
			fmt.Fprintf(w, "  %-10s    e.g. %s\n", "", commandExample[name])
		}
	}
	fmt.Fprintf(w, `
%s
Exit status: 0 on success, 2 for a configuration error (bad flags or URL),
5 when the backend cannot be opened or does not answer, 6 when the store
holds data dlock did not write; each command's help lists its own codes
('dlock help run' those of dlock run).
`, backendHelp())
}

func backendHelp() string {
	return fmt.Sprintf(`The backend is named by a URL: --url, else $DLOCK_URL, else an SQLite file
in your state directory, sqlite://$XDG_STATE_HOME/dlock/locks.db (or
~/.local/state/dlock/locks.db), which coordinates your own processes on this
host: another user, and root under sudo, have their own ('dlock help run'
shows how to share a lock among all users of a host).
URL schemes built in: %s.
`, wrap(strings.Join(dlock.Schemes(), ", "), len("URL schemes built in: "), helpWidth))
}

func printUsage(w io.Writer, c *command) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.flags(fs)
	// One column for the flags, as wide as the longest of them, so that
	// every description starts at the same place.
	width := 0
	for _, o := range c.order {
		width = max(width, len(flagSpelling(o)))
	}
	indent := 2 + width + 2
	var b strings.Builder
	for _, o := range c.order {
		names, _, _ := strings.Cut(o, " ")
		name, _, _ := strings.Cut(names, "|")
		fmt.Fprintf(&b, "  %-*s  %s\n", width, flagSpelling(o), wrap(fs.Lookup(name).Usage, indent, helpWidth))
	}
	fmt.Fprint(w, strings.Replace(c.usage, "%FLAGS%", b.String(), 1))
}

// flagSpelling shows an entry of command.order as the help lists it:
// "n|nb|nonblock D" as "-n, --nb, --nonblock D" (one letter takes one dash,
// as flock(1) spells them).
func flagSpelling(o string) string {
	names, arg, _ := strings.Cut(o, " ")
	var out []string
	for _, n := range strings.Split(names, "|") {
		if len(n) == 1 {
			out = append(out, "-"+n)
		} else {
			out = append(out, "--"+n)
		}
	}
	s := strings.Join(out, ", ")
	if arg != "" {
		s += " " + arg
	}
	return s
}

// helpWidth is the width the help's flag descriptions are wrapped to.
const helpWidth = 80

// wrap fills the words of s into lines that end before column width,
// the lines after the first indented by indent spaces (the first starts
// there too, after the flag's column).
func wrap(s string, indent, width int) string {
	var b strings.Builder
	col := indent
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case col+1+len(w) > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// optDuration is a duration flag that knows whether it was set. It takes
// Go durations ("500ms", "1m30s") and plain numbers of seconds ("2.5").
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			return fmt.Errorf("%q is not a duration (write e.g. 500ms, 30s, 5m, or a number of seconds)", s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	o.d, o.set = d, true
	return nil
}

// cliLogger is the logger given to the library: quiet unless verbose, since
// the CLI reports every outcome itself.
func cliLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelError
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// openClient opens the backend named by url (see backendURL), with
// connect as its connect_timeout when set, and reports a failure on
// stderr, returning the URL and the exit code to use.
func openClient(ctx context.Context, e *env, rawURL string, connect optDuration, verbose bool) (*dlock.Client, string, int) {
	u, err := backendURL(rawURL, e.getenv)
	if err != nil {
		e.errorf("%v", err)
		return nil, "", urlErrorCode(err)
	}
	open := u
	if connect.set {
		if open, err = withConnectTimeout(u, connect.d); err != nil {
			e.errorf("%v", err)
			return nil, u, exitUsage
		}
	}
	logger := cliLogger(e.stderr, verbose)
	// The drivers' own lines (go-redis, the MySQL driver; the library
	// silences them) and anything on slog.Default() at debug level: shown
	// with --verbose only.
	slog.SetDefault(logger)
	driverLogs(logger)
	c, err := dlock.Open(ctx, open, dlock.WithLogger(logger))
	if err != nil {
		e.errorf("%v", err)
		return nil, u, errorCode(err)
	}
	return c, u, exitOK
}

// errorCode maps a library error to an exit code.
func errorCode(err error) int {
	switch {
	case errors.Is(err, dlock.ErrInvalidName), errors.Is(err, dlock.ErrInvalidOption):
		return exitUsage
	case errors.Is(err, dlock.ErrForeignData):
		return exitForeign
	case errors.Is(err, dlock.ErrBackendUnavailable):
		// Before "busy": a wait that ended while the store did not answer
		// matches both, and the store being down is what the caller must
		// learn.
		return exitBackend
	case errors.Is(err, dlock.ErrNotAcquired):
		return exitBusy
	case errors.Is(err, dlock.ErrLeaseLost):
		return exitLost
	}
	return exitBackend
}

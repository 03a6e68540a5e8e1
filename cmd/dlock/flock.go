package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// Exit codes of the flock(1) conventions, which dlock run follows when the
// lock's name is given as an argument rather than with --name (see
// runUsage).
const (
	flockConflict = 1  // the lock is busy: flock's default conflict exit code
	flockUsage    = 64 // EX_USAGE: a bad option
	flockNoExec   = 69 // EX_UNAVAILABLE: the command cannot be executed
)

// exitCodeFlag is -E/--conflict-exit-code. A bad value is kept and reported
// by the command, which knows whether flock's usage exit code applies.
type exitCodeFlag struct {
	code int
	set  bool
	err  error
}

func (f *exitCodeFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.code)
}

func (f *exitCodeFlag) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case err != nil:
		f.err = fmt.Errorf("invalid exit code %q: not a number", s)
	case n < 0 || n > 255:
		f.err = fmt.Errorf("exit code %d out of range (expected 0 to 255)", n)
	default:
		f.code, f.set, f.err = n, true, nil
	}
	return nil
}

// lenientDuration is a duration flag whose bad value is reported by the
// command (see exitCodeFlag).
type lenientDuration struct {
	*optDuration
	err *error
}

func (l lenientDuration) Set(s string) error {
	if err := l.optDuration.Set(s); err != nil {
		*l.err = err
	}
	return nil
}

// modeFlag is one of -s/--shared and -x/-e/--exclusive: as in flock, the
// last one given wins.
type modeFlag struct {
	mode  *string
	value string
}

func (m modeFlag) String() string   { return "" }
func (m modeFlag) IsBoolFlag() bool { return true }

func (m modeFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if b {
		*m.mode = m.value
	} else if *m.mode == m.value {
		*m.mode = ""
	}
	return nil
}

// locker is the lock a command takes: a mutex, a semaphore's permit, a
// side of a read-write lock, or an election's leadership.
type locker struct {
	kind string                                          // as messages say it: "lock", "semaphore", "read lock", …
	lock func(ctx context.Context) (*dlock.Lease, error) // waits
	try  func(ctx context.Context) (*dlock.Lease, error) // nil: lock is the only way
}

// waitReport tells a person what dlock waits for. On a terminal it keeps
// one line up to date in place (how long, for whom); otherwise it writes a
// line when the holder changes, unless silenced (flock's conventions, or
// --quiet).
type waitReport struct {
	w       io.Writer
	tty     bool // w is a terminal: one line, updated in place
	silent  bool // no lines off a terminal
	quiet   bool // nothing at all
	what    string
	started time.Time

	mu      sync.Mutex
	holder  string
	ticking bool
	stop    chan struct{}
	done    chan struct{}
}

func newWaitReport(w io.Writer, tty, silent, quiet bool, what string) *waitReport {
	return &waitReport{w: w, tty: tty, silent: silent, quiet: quiet, what: what, started: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// onWait is given to dlock.OnWait.
func (r *waitReport) onWait(h dlock.Holder) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holder = describeHolder(h)
	if !r.tty {
		if !r.silent {
			fmt.Fprintf(r.w, "dlock: waiting for %s: %s\n", r.what, r.holder)
		}
		return
	}
	if !r.ticking {
		r.ticking = true
		go r.tick()
	}
	r.drawLocked()
}

func (r *waitReport) drawLocked() {
	waited := time.Since(r.started).Truncate(time.Second)
	fmt.Fprintf(r.w, "\r\x1b[Kdlock: waiting %v for %s: %s", waited, r.what, r.holder)
}

func (r *waitReport) tick() {
	defer close(r.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.drawLocked()
			r.mu.Unlock()
		}
	}
}

// end clears the line on a terminal.
func (r *waitReport) end() {
	r.mu.Lock()
	ticking := r.ticking
	r.ticking = false
	r.mu.Unlock()
	if ticking {
		close(r.stop)
		<-r.done
		fmt.Fprint(r.w, "\r\x1b[K")
	}
}

// shellCommand is the command -c runs: STRING through $SHELL, else
// /bin/sh, as flock does.
func shellCommand(getenv func(string) string, s string) []string {
	sh := getenv("SHELL")
	if sh == "" {
		sh = "/bin/sh"
	}
	return []string{sh, "-c", s}
}

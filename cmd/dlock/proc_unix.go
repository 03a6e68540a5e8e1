//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// forwarded are the signals that dlock passes on to the command's process
// group.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}

// child is a command started in a process group of its own, whose leader
// it is, under a guard.
//
// The guard is a second dlock process (see runGuard) in the command's group
// that does nothing until dlock dies: then it kills the whole group, so
// that neither the command nor what it started outlives dlock and runs on
// while the lock is granted to someone else. On Linux the command also dies
// by PR_SET_PDEATHSIG when dlock does.
//
// When dlock has a controlling terminal it also does what a shell does for
// a job: if dlock is in the terminal's foreground when it starts the
// command, the command's group becomes the foreground (so that the command
// can read the terminal and gets Ctrl-C and Ctrl-Z from it); if the command
// is stopped by Ctrl-Z or by using the terminal from the background, dlock
// takes the terminal back and stops its own process group, so that the
// shell sees the job stopped; when continued, it hands the terminal back if
// it is in the foreground again and continues the command. When the command
// exits, dlock takes the terminal back.
type child struct {
	pid  int      // the command's pid
	pgid int      // the command's process group: its pid
	pgrp int      // dlock's own process group
	tty  *os.File // dlock's controlling terminal, nil without one
	// fgGiven says that the command's group was made the foreground of tty
	// and dlock has not taken it back since. Only the wait goroutine uses it
	// after start.
	fgGiven bool

	done   chan struct{} // closed when the command has exited and been reaped
	status syscall.WaitStatus
	err    error // a failure to wait for the command, rare

	guard *exec.Cmd // the guard; nil once stood down
	alive *os.File  // the write end of the guard's pipe: its EOF says dlock died
}

// startChild starts cmd (whose Stdin, Stdout, Stderr must be nil or
// *os.File) as the leader of a process group of its own, which a guard
// joins before cmd runs (see child). The caller calls standDown once the
// command has exited. The calling goroutine must stay locked to its OS
// thread until then: the parent-death signal fires when the thread that
// started the command exits, and Go ends a thread when a goroutine locked
// to it exits.
func startChild(cmd *exec.Cmd) (*child, error) {
	c := &child{pgrp: syscall.Getpgrp(), done: make(chan struct{})}
	// cmd runs as a gate first, a dlock that execs cmd once the guard is
	// in its group: no moment when cmd runs unguarded.
	gate, open, err := gateFor(cmd)
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		c.tty = tty
		if fg, err := tcgetpgrp(tty); err == nil && fg == c.pgrp {
			attr.Foreground = true
			attr.Ctty = int(tty.Fd())
			c.fgGiven = true
		}
	}
	gate.SysProcAttr = attr
	err = gate.Start()
	gate.ExtraFiles[0].Close()
	if c.tty != nil {
		// From here on dlock may be in the background of its terminal;
		// it must not be stopped when it takes the terminal back or
		// writes a message. (Ignoring SIGTTOU before Start would make the
		// command inherit the disposition.)
		signal.Ignore(syscall.SIGTTOU)
	}
	if err == nil {
		c.pid, c.pgid = gate.Process.Pid, gate.Process.Pid
		if err = c.startGuard(); err != nil {
			gate.Process.Kill()
			gate.Wait()
		}
	}
	if err != nil {
		open.Close()
		if c.tty != nil {
			// The command's group may have become the foreground before
			// exec failed.
			c.takeTerminal()
			c.tty.Close()
		}
		return nil, err
	}
	open.Write([]byte{'g'})
	open.Close()
	go c.wait(gate.Process)
	return c, nil
}

// wait reaps the command, following it through stops when dlock has a
// terminal, and closes c.done.
func (c *child) wait(p *os.Process) {
	defer close(c.done)
	flags := 0
	if c.tty != nil {
		flags = syscall.WUNTRACED
	}
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(c.pid, &ws, flags, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			c.err = err
			break
		}
		if ws.Stopped() {
			c.stopped(ws.StopSignal())
			continue
		}
		c.status = ws
		break
	}
	if c.tty != nil {
		c.takeTerminal()
		c.tty.Close()
	}
	p.Release()
}

// stopped handles a stop of the command by signal sig.
func (c *child) stopped(sig syscall.Signal) {
	switch sig {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
	default:
		return // SIGSTOP from someone: they will continue it
	}
	c.takeTerminal()
	// Stop as the terminal would have stopped dlock's group had the command
	// been in it; returns when continued.
	stopGroup()
	if fg, err := tcgetpgrp(c.tty); err == nil && fg == c.pgrp {
		if tcsetpgrp(c.tty, c.pgid) == nil {
			c.fgGiven = true
		}
	} else {
		// Continued in the background: the command may be stopped again at
		// once if it uses the terminal; do not spin.
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(-c.pgid, syscall.SIGCONT)
}

// takeTerminal makes dlock's group the foreground of its terminal again if
// the command had it.
func (c *child) takeTerminal() {
	if c.fgGiven {
		tcsetpgrp(c.tty, c.pgrp)
		c.fgGiven = false
	}
}

// signal sends sig to the command's process group.
func (c *child) signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("cannot send %v", sig)
	}
	return syscall.Kill(-c.pgid, s)
}

// terminate asks the command's process group to end: SIGTERM, and SIGCONT
// so that a stopped process gets to handle it.
func (c *child) terminate() {
	syscall.Kill(-c.pgid, syscall.SIGTERM)
	syscall.Kill(-c.pgid, syscall.SIGCONT)
}

// kill kills the command's process group.
func (c *child) kill() { syscall.Kill(-c.pgid, syscall.SIGKILL) }

// groupAlive reports whether processes of the command's group are left.
// Call it after standDown: the guard is one of them until then.
func (c *child) groupAlive() bool { return syscall.Kill(-c.pgid, 0) == nil }

// exitCode returns the command's exit status as a shell reports it: its
// status, or 128+N if it was killed by signal N. Call it after done.
func (c *child) exitCode() int {
	switch {
	case c.err != nil:
		return exitFailure
	case c.status.Signaled():
		return exitSignalled + int(c.status.Signal())
	}
	return c.status.ExitStatus()
}

// describe says how the command ended. Call it after done.
func (c *child) describe() string {
	switch {
	case c.err != nil:
		return fmt.Sprintf("could not be waited for: %v", c.err)
	case c.status.Signaled():
		s := c.status.Signal()
		return fmt.Sprintf("was killed by signal %d (%v)", int(s), s)
	}
	return fmt.Sprintf("exited with status %d", c.status.ExitStatus())
}

// signalNumber returns the number of sig for an exit code of 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

func tcgetpgrp(tty *os.File) (int, error) {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
	if errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

func tcsetpgrp(tty *os.File, pgrp int) error {
	p := int32(pgrp)
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&p)))
	if errno != 0 {
		return errno
	}
	return nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := tcgetpgrp(f)
	return err == nil
}

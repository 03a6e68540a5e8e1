//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

import (
	"fmt"
	"os"
	"os/exec"
)

// guardArg and gateArg are the hidden arguments of the guard and the gate,
// which exist only on Unix (see guard_unix.go); no argument matches these.
const guardArg, gateArg = "\x00no guard", "\x00no gate"

func runGuard() int        { return exitUsage }
func runGate([]string) int { return exitUsage }

// forwarded are the signals that dlock passes on to the command.
var forwarded = []os.Signal{os.Interrupt}

// child is a started command. Without Unix process groups, signals reach
// the command only, not its own children.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }
func (c *child) terminate()                 { c.cmd.Process.Kill() }
func (c *child) kill()                      { c.cmd.Process.Kill() }
func (c *child) groupAlive() bool           { return false }
func (c *child) standDown()                 {}

func (c *child) exitCode() int {
	if c.cmd.ProcessState != nil && c.cmd.ProcessState.ExitCode() >= 0 {
		return c.cmd.ProcessState.ExitCode()
	}
	return exitFailure
}

func (c *child) describe() string {
	if c.cmd.ProcessState == nil {
		return fmt.Sprintf("could not be waited for: %v", c.err)
	}
	return c.cmd.ProcessState.String()
}

func signalNumber(sig os.Signal) int {
	if sig == os.Interrupt {
		return 2
	}
	return 0
}

// isTerminal reports whether f is a terminal: never, here, so that dlock
// writes lines rather than redrawing one.
func isTerminal(f *os.File) bool { return false }

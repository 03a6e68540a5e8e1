//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// guardArg is the hidden first argument that makes dlock a guard.
const guardArg = "__guard"

// The guard's files, after stdin, stdout and stderr.
const (
	guardAliveFD = 3 // read end of a pipe whose write end only dlock holds
	guardReadyFD = 4 // closed by the guard once it ignores the group's signals
)

// gateArg is the hidden first argument that makes dlock a gate: it waits
// until dlock opens it, then execs the command.
const gateArg = "__gate"

// gateFD is the gate's read end of the pipe that opens it.
const gateFD = 3

// selfExe returns the path of dlock's binary for the guard and the gate.
func selfExe() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil // right even if the binary was replaced since
	}
	return os.Executable()
}

// gateFor returns a gate for cmd: a command with cmd's environment and
// files that runs dlock as a gate, which becomes cmd once a byte is written
// to open, or exits if open is closed first. The caller closes
// gate.ExtraFiles[0] after starting it.
func gateFor(cmd *exec.Cmd) (gate *exec.Cmd, open *os.File, err error) {
	exe, err := selfExe()
	if err != nil {
		return nil, nil, fmt.Errorf("starting dlock's gate process: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("starting dlock's gate process: %w", err)
	}
	gate = exec.Command(exe, append([]string{gateArg, cmd.Path}, cmd.Args...)...)
	gate.Args[0] = cmd.Args[0] // for ps, in the moment before the exec
	gate.Env, gate.Dir = cmd.Env, cmd.Dir
	gate.Stdin, gate.Stdout, gate.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	gate.ExtraFiles = []*os.File{r}
	return gate, w, nil
}

// runGate is the gate process (see gateFor): args are the command's path
// and argv.
func runGate(args []string) int {
	open := os.NewFile(gateFD, "gate")
	if len(args) < 2 || open == nil {
		fmt.Fprintf(os.Stderr, "dlock: %s is dlock run's internal gate process, not a command\n", gateArg)
		return exitUsage
	}
	var b [1]byte
	if n, _ := open.Read(b[:]); n != 1 {
		return exitFailure // dlock died, or could not start the guard
	}
	open.Close()
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "dlock: cannot run %q: %v\n", args[1], err)
	return startFailureCode(err)
}

// startGuard starts the guard in the command's group c.pgid and returns
// once it is ready, so that a signal sent to the group cannot kill it.
func (c *child) startGuard() error {
	exe, err := selfExe()
	if err != nil {
		return fmt.Errorf("starting dlock's guard process: %w", err)
	}
	aliveR, aliveW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("starting dlock's guard process: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		aliveR.Close()
		aliveW.Close()
		return fmt.Errorf("starting dlock's guard process: %w", err)
	}
	g := exec.Command(exe, guardArg)
	g.Args[0] = "dlock-guard" // for ps
	g.ExtraFiles = []*os.File{aliveR, readyW}
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: c.pgid}
	err = g.Start()
	aliveR.Close()
	readyW.Close()
	if err == nil {
		// The guard closes its end when ready, or dies: either way EOF.
		var b [1]byte
		if n, _ := readyR.Read(b[:]); n != 1 || b[0] != 'r' {
			g.Process.Kill()
			g.Wait()
			err = fmt.Errorf("it exited before it was ready")
		}
	}
	readyR.Close()
	if err != nil {
		aliveW.Close()
		return fmt.Errorf("starting dlock's guard process: %w", err)
	}
	c.guard, c.alive = g, aliveW
	return nil
}

// standDown ends the guard without it killing the group: the command has
// exited, and dlock deals with what is left of its group itself.
func (c *child) standDown() {
	if c.guard == nil {
		return
	}
	// Killed and reaped before its pipe closes, so it cannot take the EOF
	// for dlock's death.
	c.guard.Process.Kill()
	c.guard.Wait()
	c.alive.Close()
	c.guard, c.alive = nil, nil
}

// runGuard is the guard process (see child): it ignores the signals that
// dlock passes on to the command's group and the terminal's job control
// signals, says it is ready, waits until the pipe from dlock reaches EOF —
// dlock has died, or has killed the guard first — and then kills its process
// group, itself included.
func runGuard() int {
	signal.Ignore(append(forwarded, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)...)
	alive, ready := os.NewFile(guardAliveFD, "alive"), os.NewFile(guardReadyFD, "ready")
	if alive == nil || ready == nil {
		fmt.Fprintf(os.Stderr, "dlock: %s is dlock run's internal guard process, not a command\n", guardArg)
		return exitUsage
	}
	if _, err := ready.Write([]byte{'r'}); err != nil {
		fmt.Fprintf(os.Stderr, "dlock: %s is dlock run's internal guard process, not a command\n", guardArg)
		return exitUsage
	}
	ready.Close()
	io.Copy(io.Discard, alive) // until EOF: every copy of the write end is closed
	syscall.Kill(0, syscall.SIGKILL)
	return exitFailure // not reached
}

package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned (wrapped) by Kill, Stop, Pause and Resume when
// the process is not running.
var ErrNotRunning = errors.New("testserver: process not running")

const (
	stopTimeout  = 15 * time.Second
	pollInterval = 20 * time.Millisecond
	logTailLines = 200
)

// Process is one server process started by this package. Every server
// handle embeds it. Its methods are safe for concurrent use and never fail
// the test themselves: they return errors, so a fault-injecting goroutine can
// call them.
type Process struct {
	name         string
	dir          string
	logPath      string
	addr         string
	stopSig      syscall.Signal
	gentleDown   bool // teardown with stopSig instead of SIGKILL
	timeout      time.Duration
	probeTimeout time.Duration
	cred         *syscall.Credential
	ready        func(ctx context.Context) error

	mu      sync.Mutex
	args    []string // args[0] is the binary
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	paused  bool
	logOff  int64
	starts  int
}

func newProcess(name, dir, addr string, args []string) *Process {
	return &Process{
		name:         name,
		dir:          dir,
		logPath:      filepath.Join(dir, "server.log"),
		addr:         addr,
		stopSig:      syscall.SIGTERM,
		timeout:      30 * time.Second,
		probeTimeout: time.Second,
		args:         args,
	}
}

// Name returns a short name of the server for messages, such as "redis" or
// "zookeeper[2]".
func (p *Process) Name() string { return p.name }

// Addr returns the server's client address, "127.0.0.1:port". It stays the
// same across restarts.
func (p *Process) Addr() string { return p.addr }

// Port returns the port of Addr.
func (p *Process) Port() int {
	_, port, _ := net.SplitHostPort(p.addr)
	n, _ := strconv.Atoi(port)
	return n
}

// Dir returns the server's temporary directory (data, configuration, log).
func (p *Process) Dir() string { return p.dir }

// LogPath returns the path of the file that collects the server's output over
// all of its starts.
func (p *Process) LogPath() string { return p.logPath }

// Log returns the server's output so far, over all of its starts; each start
// begins with a line "=== testserver: start ...".
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Args returns the command line the server is started with.
func (p *Process) Args() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.args...)
}

// PID returns the process id of the running server, or 0 when it is not
// running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the server process is running (paused counts as
// running).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// Paused reports whether the server is paused by Pause.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked() && p.paused
}

// Exited returns a channel that is closed when the current run of the server
// exits, or nil when it is not running.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return nil
	}
	return p.done
}

// proc gives generic code over server handles their Process.
func (p *Process) proc() *Process { return p }

func (p *Process) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *Process) setArgs(args []string) {
	p.mu.Lock()
	p.args = args
	p.mu.Unlock()
}

// Start starts the server again with the same command line (same ports, same
// data directory) without waiting until it is ready; see WaitReady. It fails
// if the server is running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("testserver: %s already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	lf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %s: %w", p.name, err)
	}
	defer lf.Close() // the child has its own copy
	p.starts++
	fmt.Fprintf(lf, "=== testserver: start %d of %s at %s: %s\n", p.starts, p.name,
		time.Now().Format("15:04:05.000"), strings.Join(p.args, " "))
	if st, err := lf.Stat(); err == nil {
		p.logOff = st.Size()
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Dir = p.dir
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.SysProcAttr = sysProcAttr(p.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testserver: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.exitErr = cmd, done, false, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if p.cmd == cmd {
			p.exitErr = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// WaitReady waits until the server passes its readiness check (a real
// protocol exchange), for at most the start timeout.
func (p *Process) WaitReady() error {
	return waitReady([]*Process{p}, p.timeout)
}

// Restart stops the server gracefully if it is running, starts it again with
// the same ports and data directory, and waits until it is ready.
func (p *Process) Restart() error {
	if p.Running() {
		if err := p.Stop(); err != nil && !errors.Is(err, ErrNotRunning) {
			return err
		}
	}
	if err := p.Start(); err != nil {
		return err
	}
	return p.WaitReady()
}

// Kill sends SIGKILL to the server (and to the processes it forked, such as
// PostgreSQL backends) and waits until it has exited.
func (p *Process) Kill() error {
	p.mu.Lock()
	if !p.runningLocked() {
		p.mu.Unlock()
		return fmt.Errorf("kill %s: %w", p.name, ErrNotRunning)
	}
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	killTree(cmd.Process)
	<-done
	return nil
}

// Stop shuts the server down gracefully (SIGINT for PostgreSQL, SIGTERM for
// the others; a paused server is resumed for it) and waits until it has
// exited. If it has not exited after 15 s it is killed and Stop returns an
// error.
func (p *Process) Stop() error {
	return p.stop(p.stopSig, stopTimeout)
}

func (p *Process) stop(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	if !p.runningLocked() {
		p.mu.Unlock()
		return fmt.Errorf("stop %s: %w", p.name, ErrNotRunning)
	}
	cmd, done, paused := p.cmd, p.done, p.paused
	p.paused = false
	p.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	if paused {
		_ = signalTree(cmd.Process, syscall.SIGCONT)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		killTree(cmd.Process)
		<-done
		return fmt.Errorf("testserver: %s did not exit within %v after %v; killed", p.name, timeout, sig)
	}
}

// Pause stops the server with SIGSTOP (and the processes it forked). Clients
// see a server that accepts TCP connections but never answers.
func (p *Process) Pause() error { return p.setPaused("pause", syscall.SIGSTOP, true) }

// Resume continues a server paused by Pause (SIGCONT).
func (p *Process) Resume() error { return p.setPaused("resume", syscall.SIGCONT, false) }

// setPaused sends sig to the process tree and records the paused state.
func (p *Process) setPaused(verb string, sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%s %s: %w", verb, p.name, ErrNotRunning)
	}
	if err := signalTree(p.cmd.Process, sig); err != nil {
		return fmt.Errorf("%s %s: %w", verb, p.name, err)
	}
	p.paused = paused
	return nil
}

// teardown ends the process at the end of the test.
func (p *Process) teardown() {
	if !p.Running() {
		return
	}
	if p.gentleDown {
		_ = p.stop(p.stopSig, 5*time.Second)
		return
	}
	_ = p.Kill()
}

// logSinceStart returns the output of the current (or last) run.
func (p *Process) logSinceStart() string {
	p.mu.Lock()
	off := p.logOff
	p.mu.Unlock()
	b, _ := os.ReadFile(p.logPath)
	if off > int64(len(b)) {
		off = 0
	}
	return string(b[off:])
}

func (p *Process) logTail(lines int) string {
	s := strings.TrimRight(p.Log(), "\n")
	parts := strings.Split(s, "\n")
	if len(parts) <= lines {
		return s
	}
	return fmt.Sprintf("... (%d earlier lines in %s)\n", len(parts)-lines, p.logPath) +
		strings.Join(parts[len(parts)-lines:], "\n")
}

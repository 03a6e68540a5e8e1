package testserver

import (
	"bytes"
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
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("pause %s: %w", p.name, ErrNotRunning)
	}
	if err := signalTree(p.cmd.Process, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %s: %w", p.name, err)
	}
	p.paused = true
	return nil
}

// Resume continues a server paused by Pause (SIGCONT).
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("resume %s: %w", p.name, ErrNotRunning)
	}
	if err := signalTree(p.cmd.Process, syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", p.name, err)
	}
	p.paused = false
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

// startError says that a server exited or did not become ready.
type startError struct {
	name   string
	msg    string
	bind   bool
	detail string
}

func (e *startError) Error() string {
	s := fmt.Sprintf("testserver: %s %s", e.name, e.msg)
	if e.detail != "" {
		s += "\n--- last lines of its output ---\n" + e.detail
	}
	return s
}

func isBindError(err error) bool {
	var se *startError
	return errors.As(err, &se) && se.bind
}

func looksLikeBindError(log string) bool {
	l := strings.ToLower(log)
	return strings.Contains(l, "address already in use") || strings.Contains(l, "bindexception") ||
		strings.Contains(l, "could not bind") || strings.Contains(l, "bind on tcp/ip port")
}

func lastLines(s string, n int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > n {
		parts = parts[len(parts)-n:]
	}
	return strings.Join(parts, "\n")
}

// waitReady polls the readiness check of every process until all pass,
// one of them exits, or the timeout passes.
func waitReady(procs []*Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ok := make([]bool, len(procs))
	var lastErr error
	for {
		pending := 0
		for i, p := range procs {
			if ok[i] {
				continue
			}
			p.mu.Lock()
			running := p.runningLocked()
			exitErr := p.exitErr
			started := p.done != nil
			p.mu.Unlock()
			if !running {
				if !started {
					return &startError{name: p.name, msg: "was never started"}
				}
				log := p.logSinceStart()
				return &startError{name: p.name, msg: fmt.Sprintf("exited before it was ready (%v)", exitErr),
					bind: looksLikeBindError(log), detail: lastLines(log, 30)}
			}
			if err := ownsListener(p); err != nil {
				lastErr = fmt.Errorf("%s: %w", p.name, err)
				pending++
				continue
			}
			pt := p.probeTimeout
			if rem := time.Until(deadline); rem < pt {
				pt = max(rem, 100*time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), pt)
			err := p.ready(ctx)
			cancel()
			if err == nil {
				ok[i] = true
				continue
			}
			lastErr = fmt.Errorf("%s: %w", p.name, err)
			pending++
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var detail string
			for i, p := range procs {
				if !ok[i] {
					detail = lastLines(p.logSinceStart(), 30)
					break
				}
			}
			return &startError{name: procs[0].name, msg: fmt.Sprintf("not ready after %v: %v", timeout, lastErr), detail: detail}
		}
		time.Sleep(pollInterval)
	}
}

// killTree SIGKILLs a process and its descendants, and waits (briefly) until
// the descendants are gone, so that a restart does not meet leftovers such
// as PostgreSQL backends still attached to shared memory.
func killTree(proc *os.Process) {
	kids := descendants(proc.Pid)
	_ = proc.Signal(syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, k := range kids {
		for alive(k) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// signalTree signals a process and its descendants. A process that has
// already exited (but is not yet reaped by Wait) gives ErrNotRunning.
func signalTree(proc *os.Process, sig syscall.Signal) error {
	kids := descendants(proc.Pid)
	if err := proc.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
			return ErrNotRunning
		}
		return err
	}
	for _, k := range kids {
		_ = syscall.Kill(k, sig)
	}
	return nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}

// descendants returns the pids of all descendants of pid, read from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[pp] = append(children[pp], n)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, k := range children[c] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

var (
	portMu    sync.Mutex
	usedPorts = map[int]bool{}
	// portsHook, if set (by tests), may replace the ports freePorts returns.
	portsHook func(n int) []int
)

// freePorts returns n distinct free loopback ports that this process has not
// handed out before.
func freePorts(n int) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	if portsHook != nil {
		if ps := portsHook(n); ps != nil {
			return ps, nil
		}
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("testserver: no free ports")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if usedPorts[port] {
			continue
		}
		usedPorts[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// fixture owns the processes and directories that one constructor call
// started, and tears them down in t.Cleanup.
type fixture struct {
	t     T
	mu    sync.Mutex
	procs []*Process
	dirs  []string
}

func newFixture(t T) *fixture {
	f := &fixture{t: t}
	t.Cleanup(f.cleanup)
	return f
}

func keepDirs() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(KeepEnv))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// tempDir makes a short temporary directory (PostgreSQL's socket path must
// stay under 108 bytes, and t.TempDir paths contain the test name).
func (f *fixture) tempDir(prefix string) (string, error) {
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	d, err := os.MkdirTemp(base, "dlock-"+prefix+"-")
	if err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	f.mu.Lock()
	f.dirs = append(f.dirs, d)
	f.mu.Unlock()
	return d, nil
}

func (f *fixture) add(p *Process) {
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
}

func (f *fixture) killAll() {
	f.mu.Lock()
	procs := append([]*Process(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		if p.Running() {
			_ = p.Kill()
		}
	}
}

func (f *fixture) cleanup() {
	f.mu.Lock()
	procs := append([]*Process(nil), f.procs...)
	dirs := append([]string(nil), f.dirs...)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.teardown()
		}()
	}
	wg.Wait()
	if f.t.Failed() {
		for _, p := range procs {
			f.t.Logf("testserver: %s (%s) output:\n%s", p.name, p.addr, p.logTail(logTailLines))
		}
	}
	if keepDirs() {
		for _, d := range dirs {
			f.t.Logf("testserver: kept %s (%s set)", d, KeepEnv)
		}
		return
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// launch starts a set of servers: build allocates ports and directories and
// returns the processes (not started); they are started together and waited
// for; then after (if not nil) finishes the setup (cluster creation,
// databases). When a server fails to bind its ports, everything is killed and
// tried again with new ports. Any other failure fails the test.
func (f *fixture) launch(timeout time.Duration, build func() ([]*Process, error), after func() error) {
	f.t.Helper()
	const attempts = 4
	for attempt := 1; ; attempt++ {
		err := f.tryLaunch(timeout, build, after)
		if err == nil {
			return
		}
		f.killAll()
		if isBindError(err) && attempt < attempts {
			f.t.Logf("testserver: port clash, retrying with new ports: %v", err)
			continue
		}
		f.t.Fatalf("%v", err)
	}
}

func (f *fixture) tryLaunch(timeout time.Duration, build func() ([]*Process, error), after func() error) error {
	procs, err := build()
	if err != nil {
		return err
	}
	for _, p := range procs {
		p.timeout = timeout
		f.add(p)
	}
	for _, p := range procs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	if err := waitReady(procs, timeout); err != nil {
		return err
	}
	if after != nil {
		return after()
	}
	return nil
}

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

// portAndDir allocates one free port and a temporary directory for a
// single-port server.
func (f *fixture) portAndDir(prefix string) (int, string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, "", err
	}
	dir, err := f.tempDir(prefix)
	if err != nil {
		return 0, "", err
	}
	return ports[0], dir, nil
}

// runSetup runs a set-up program (initdb, mariadb-install-db) in dir, as
// cred when not nil, and returns its output in the error.
func runSetup(dir string, cred *syscall.Credential, bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testserver: %s: %v\n%s", filepath.Base(bin), err, out)
	}
	return nil
}

// createTestDB is the after step of the SQL servers: it runs sql (which
// creates the database "test") through query, within timeout.
func createTestDB(timeout time.Duration, query func(ctx context.Context, db, sql string) ([][]string, error), db, sql string) func() error {
	return func() error {
		ctx, cancel := ctxTimeout(timeout)
		defer cancel()
		if _, err := query(ctx, db, sql); err != nil {
			return fmt.Errorf("testserver: create database test: %w", err)
		}
		return nil
	}
}

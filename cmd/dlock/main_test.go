//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run the dlock binary as a real subprocess, built once by
// TestMain (with -race when the tests run with it).

var (
	dlockBin    string // the built binary
	raceEnabled bool   // set by race_test.go
	schemes     string // the URL schemes the binary knows, from "dlock help"
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	setParallel()
	dir, err := os.MkdirTemp("", "dlock-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		// As scripts/test does: SQLite's C translated to Go is not ours
		// to check, and instrumented it made SQLite 2-3x slower.
		args = append(args, "-race", "-gcflags=modernc.org/...=-race=false")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dlock:", err)
		return 1
	}
	out, err := exec.Command(dlockBin, "help").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlock help:", err)
		return 1
	}
	_, schemes, _ = strings.Cut(string(out), "URL schemes built in: ")
	schemes, _, _ = strings.Cut(schemes, ".\n") // wrapped over lines
	schemes = strings.Join(strings.Fields(schemes), " ") + "."
	return m.Run()
}

// minParallel is how many parallel tests run at once unless -parallel
// says otherwise: the tests spend most of their time waiting on the dlock
// processes they start, on TTLs and on servers, not on a CPU, so more than
// -parallel's default of GOMAXPROCS (2 on a small CI machine) run beside
// each other. The tests that time a short TTL's renewals or an upper bound
// are not parallel.
const minParallel = 4

// setParallel raises -test.parallel to minParallel if it was not given.
func setParallel() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !given {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < minParallel {
			f.Value.Set(strconv.Itoa(minParallel))
		}
	}
}

// sqliteURL returns the URL of a fresh SQLite lock database, or skips the
// test if the binary has no sqlite backend (it is being written).
func sqliteURL(t *testing.T) string {
	t.Helper()
	if !strings.Contains(schemes+",", "sqlite,") && !strings.HasSuffix(schemes, "sqlite.") {
		t.Skipf("the dlock binary has no sqlite backend (schemes: %s); cross-process tests need it", schemes)
	}
	return "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "locks.db"))
}

// testEnv is a clean environment for dlock: no DLOCK_* variables from the
// caller, and a state directory and home of the test's own.
func testEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DLOCK_") || strings.HasPrefix(kv, "XDG_STATE_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "XDG_STATE_HOME="+t.TempDir(), "HOME="+t.TempDir())
	return append(env, extra...)
}

// proc is a dlock process started by a test.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	code   int
}

// start starts dlock with args in env (testEnv if nil). The test's cleanup
// kills it if it is still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startIn(t, env, nil, args...)
}

// startIn is start with stdin.
func startIn(t *testing.T, env []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	return startProg(t, env, stdin, dlockBin, args...)
}

// startProg starts the program name (which runs dlock) as start does.
func startProg(t *testing.T, env []string, stdin io.Reader, name string, args ...string) *proc {
	t.Helper()
	if env == nil {
		env = testEnv(t)
	}
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = env
	p.cmd.WaitDelay = 5 * time.Second // a leftover grandchild must not hang the test
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p to exit and returns its exit code (-1 if it was killed
// by a signal).
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("dlock %q did not exit within 60s; stderr:\n%s", p.cmd.Args[1:], p.stderr.String())
	}
	return p.code
}

// result is the outcome of a dlock run to completion.
type result struct {
	code           int
	stdout, stderr string
}

// runDlock runs the binary with args to completion in env (testEnv if nil).
func runDlock(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := start(t, env, args...)
	code := p.wait()
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// waitFile waits until path exists and is not empty, and returns its
// content.
func waitFile(t *testing.T, path string, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return string(b)
		}
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("dlock exited with %d before %s appeared; stderr:\n%s", p.code, path, p.stderr.String())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 30s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStderr waits until p's stderr contains s.
func waitStderr(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), s) {
		select {
		case <-p.done:
			if strings.Contains(p.stderr.String(), s) {
				return
			}
			t.Fatalf("dlock exited with %d before writing %q; stderr:\n%s", p.code, s, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dlock did not write %q within 30s; stderr:\n%s", s, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

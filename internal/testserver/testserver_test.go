package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records Skip and Fatal instead of ending the goroutine.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                          {}
func (f *fakeTB) Skip(args ...any)                 { f.skipped = fmt.Sprint(args...) }
func (f *fakeTB) Skipf(format string, args ...any) { f.skipped = fmt.Sprintf(format, args...) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestRequired(t *testing.T) {
	for _, c := range []struct {
		env  string
		kind Kind
		want bool
	}{
		{"", KindRedis, false},
		{"all", KindEtcd, true},
		{"ALL", KindMariaDB, true},
		{"redis,etcd", KindEtcd, true},
		{"redis, etcd", KindPostgres, false},
		{"zk", KindZooKeeper, true},
		{"mysql", KindMariaDB, true},
		{"postgresql", KindPostgres, true},
	} {
		t.Setenv(RequireEnv, c.env)
		if got := Required(c.kind); got != c.want {
			t.Errorf("%s=%q: Required(%s) = %v, want %v", RequireEnv, c.env, c.kind, got, c.want)
		}
	}
}

func TestNeedMissingBinary(t *testing.T) {
	t.Setenv(RequireEnv, "")
	f := &fakeTB{TB: t}
	if p := Need(f, KindRedis, "no-such-server-binary", "no-such-package"); p != "" {
		t.Fatalf("Need returned %q", p)
	}
	if want := "no-such-server-binary not found: apt-get install no-such-package"; f.skipped != want || f.failed != "" {
		t.Fatalf("skipped %q failed %q, want skip %q", f.skipped, f.failed, want)
	}

	t.Setenv(RequireEnv, "redis")
	f = &fakeTB{TB: t}
	Need(f, KindRedis, "no-such-server-binary", "no-such-package")
	if f.failed == "" || f.skipped != "" {
		t.Fatalf("under %s=redis: skipped %q failed %q, want a failure", RequireEnv, f.skipped, f.failed)
	}

	f = &fakeTB{TB: t}
	if p := Need(f, KindRedis, "sh", "dash"); p == "" || f.failed != "" || f.skipped != "" {
		t.Fatalf("Need(sh) = %q (skipped %q failed %q)", p, f.skipped, f.failed)
	}
}

func TestBindErrorDetection(t *testing.T) {
	for _, line := range []string{
		"# Warning: Could not create server TCP listening socket 127.0.0.1:47111: bind: Address already in use",
		`{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:47111: bind: address already in use"}`,
		"[ERROR] Can't start server: Bind on TCP/IP port. Got error: 98: Address already in use",
		"java.net.BindException: Address already in use",
		`LOG:  could not bind IPv4 address "127.0.0.1": Address already in use`,
	} {
		if !looksLikeBindError(line) {
			t.Errorf("not detected as a bind error: %s", line)
		}
	}
	if looksLikeBindError("FATAL: data directory has wrong ownership") {
		t.Error("false positive")
	}
}

// TestBindRetry makes the first start meet a port that is taken: the
// server must come up on new ports.
func TestBindRetry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	portsHook = func(n int) []int {
		calls++
		if calls == 1 {
			return []int{taken}
		}
		return nil
	}
	defer func() { portsHook = nil }()
	s := Redis(t)
	if s.Port() == taken || calls < 2 {
		t.Fatalf("port %d (taken %d), %d allocations", s.Port(), taken, calls)
	}
	redisDo(t, s.Addr(), "PING")
}

func TestFreePortsDistinct(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 20; i++ {
		ps, err := freePorts(5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}

// TestNoGoroutineLeft checks that nothing this package starts outlives the
// test's cleanup (other packages run goleak).
func TestNoGoroutineLeft(t *testing.T) {
	t.Run("servers", func(t *testing.T) {
		s := Redis(t)
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		RedisN(t, 2)
	})
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	if bytes.Contains(buf, []byte("internal/testserver.(*Process).Start")) {
		t.Fatalf("a process goroutine outlived the test:\n%s", buf)
	}
}

// TestConcurrentFaults drives one server from several goroutines at once;
// run with -race.
func TestConcurrentFaults(t *testing.T) {
	t.Parallel()
	s := Redis(t)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				var err error
				switch (g + i) % 4 {
				case 0:
					err = s.Kill()
				case 1:
					err = s.Restart()
				case 2:
					if err = s.Pause(); err == nil {
						err = s.Resume()
					}
				case 3:
					_ = s.PID()
					_ = s.Log()
					err = s.Stop()
				}
				if err != nil && !errors.Is(err, ErrNotRunning) {
					t.Logf("op %d: %v", (g+i)%4, err) // races between Start calls are expected
				}
			}
		}()
	}
	wg.Wait()
	if s.Running() {
		_ = s.Resume()
	} else if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitReady(); err != nil {
		t.Fatal(err)
	}
}

func TestKeepEnv(t *testing.T) {
	t.Setenv(KeepEnv, "1")
	var dir string
	t.Run("keep", func(t *testing.T) {
		dir = Redis(t).Dir()
	})
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("dir not kept: %v", err)
	}
	os.RemoveAll(dir)
	t.Setenv(KeepEnv, "")
	t.Run("remove", func(t *testing.T) {
		dir = Redis(t).Dir()
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir not removed: %v", err)
	}
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	Require(t, KindRedis)
	bin, _ := lookBinary("redis-server")
	f := &fixture{t: t}
	defer f.cleanup()
	var p *Process

	// A readiness check that never passes ends in an error naming the
	// server and quoting its output. The bound leaves redis-server time to
	// start listening on a loaded machine (0.43 s was seen in CI).
	start := time.Now()
	err := f.tryLaunch(3*time.Second, func() ([]*Process, error) {
		var err error
		p, err = newRedisProcess(f, "redis-stuck", func(dir string, port int) []string { return redisArgs(bin, port, dir) })
		if err != nil {
			return nil, err
		}
		p.ready = func(context.Context) error { return errors.New("never ready") }
		return []*Process{p}, nil
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "redis-stuck not ready after 3s: redis-stuck: never ready") ||
		!strings.Contains(err.Error(), "Ready to accept connections") || isBindError(err) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	f.killAll()

	// A server that exits is reported at once, with its output.
	start = time.Now()
	err = f.tryLaunch(20*time.Second, func() ([]*Process, error) {
		var err error
		p, err = newRedisProcess(f, "redis-bad", func(dir string, port int) []string {
			return redisArgs(bin, port, dir, "--no-such-directive", "x")
		})
		return []*Process{p}, err
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "redis-bad exited before it was ready") ||
		!strings.Contains(err.Error(), "no-such-directive") || isBindError(err) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("exit noticed after %v", d)
	}
}

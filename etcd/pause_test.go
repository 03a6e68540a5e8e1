package etcd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// childEnv makes the test binary a waiter process: "URL NAME TTL".
const childEnv = "DLOCK_ETCD_TEST_WAITER"

// childWaiter is the main function of the waiter process: it waits for the
// lock, says "waiting" when it is queued, and then prints the outcome.
func childWaiter() int {
	f := strings.Fields(os.Getenv(childEnv))
	if len(f) != 3 {
		fmt.Println("error: bad", childEnv)
		return 2
	}
	url, name := f[0], f[1]
	ttl, err := time.ParseDuration(f[2])
	if err != nil {
		fmt.Println("error: bad", childEnv, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close()
	m := c.Mutex(name, dlock.TTL(ttl), dlock.OnWait(func(dlock.Holder) { fmt.Println("waiting") }))
	l, err := m.Lock(ctx)
	if err != nil {
		fmt.Printf("error: lost=%v: %v\n", errors.Is(err, dlock.ErrLeaseLost), err)
		return 0
	}
	fmt.Printf("granted %d err=%v\n", l.Token(), l.Err())
	l.Unlock(ctx)
	return 0
}

// A waiter process stopped (SIGSTOP) past its lease's TTL, then resumed,
// is not told that it holds the lock, even though the lock was released
// and its predecessor's key deleted while it was stopped (etcd issue
// 11456): its own key went with its lease, and it gets an error saying so.
func TestPausedWaiterIsNotGranted(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, 2*time.Minute)
	holder, third := client(t, eps, "pause"), client(t, eps, "pause")
	held, err := holder.Mutex("x", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=etcd://%s/pause x 1s", childEnv, srv.Addr()))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		for range lines {
		}
		<-exited
	})
	next := func(d time.Duration) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("waiter process ended without a result")
			}
			return l
		case <-time.After(d):
			t.Fatalf("no output from the waiter process within %v", d)
		}
		return ""
	}
	if l := next(30 * time.Second); l != "waiting" {
		t.Fatalf("waiter process: %q, want waiting", l)
	}

	cli := raw(t, eps)
	keys := func() int {
		resp, err := cli.Get(ctx, "pause/x/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	if n := keys(); n != 2 {
		t.Fatalf("%d keys under the lock, want the holder's and the waiter's", n)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for keys() != 1 {
		if time.Since(stopped) > 15*time.Second {
			t.Fatal("the stopped waiter's key is still there after 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the stopped waiter's key expired %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	// The lock frees and is taken by another process while the waiter is
	// stopped: its predecessor's key is gone when it resumes.
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	now, err := third.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := next(30 * time.Second)
	t.Logf("resumed waiter: %s", res)
	if !strings.HasPrefix(res, "error: lost=true") || !strings.Contains(res, "NOT granted") {
		t.Errorf("resumed waiter: %q; want an error matching ErrLeaseLost that says it was not granted", res)
	}
	if err := now.Err(); err != nil {
		t.Errorf("the holder's lease after the waiter resumed: %v", err)
	}
	if err := now.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

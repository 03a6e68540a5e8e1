package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
)

// TestFrozenServerTryLock: TryLock under a context without a deadline,
// against a server that hangs (SIGSTOP: the connection stays open and
// nothing answers), gives up with ErrBackendUnavailable after the
// backend's request timeout, as etcd and redis do. Before, it waited as
// long as the server hung. The limit below only guards against a hang.
func TestFrozenServerTryLock(t *testing.T) {
	srv := zkServer(t)
	c := client(t, connect(t, []string{srv.Addr()}, zookeeper.Root("/frozen"), zookeeper.SessionTimeout(4*time.Second)))
	// A first grant creates the root and the container, so the attempt
	// under test is the plain one.
	l, err := c.Mutex("frozen", dlock.TTL(2*time.Second)).TryLock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Resume() })
	res := make(chan error, 1)
	go func() {
		l, err := c.Mutex("frozen", dlock.TTL(2*time.Second)).TryLock(context.Background())
		if err == nil {
			l.Unlock(context.Background())
		}
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, dlock.ErrBackendUnavailable) {
			t.Errorf("TryLock on a frozen server: %v, want ErrBackendUnavailable", err)
		}
		t.Logf("TryLock: %v", err)
	case <-time.After(time.Minute):
		srv.Resume()
		<-res
		t.Fatal("TryLock(context.Background()) on a frozen server did not return within a minute")
	}
}

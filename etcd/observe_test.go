package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestWatchResumesAfterConnectionDrop: an observer's connection to etcd
// goes silent (a proxy freezes), the leader resigns and another is elected
// meanwhile, then the connection is cut. The backend's subscription says
// the connection dropped, and Observe reports an error, then the new
// leader: what changed while it could not see.
func TestWatchResumesAfterConnectionDrop(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	proxy := testserver.NewProxy(t, srv.Addr())
	prefix := fmt.Sprintf("resume-%d", time.Now().UnixNano())
	direct := []string{srv.Endpoint()}
	via := []string{"http://" + proxy.Addr()}
	name := "leader"

	// The backend's own subscription, through the proxy.
	wb := open(t, via, prefix)
	t.Cleanup(func() { wb.Close() })
	w, ok := dlock.Backend(wb).(dlock.Watcher)
	if !ok {
		t.Fatal("the etcd backend is not a dlock.Watcher")
	}
	ctx := ctxT(t, time.Minute)
	sub, err := w.Watch(ctx, name) // without a namespace the key is the name
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// An observer, through the proxy too.
	obs := client(t, via, prefix).Election(name).Observe(ctx)
	next := func(what string, ok func(dlock.Leader) bool) dlock.Leader {
		t.Helper()
		for {
			select {
			case ld, open := <-obs:
				if !open {
					t.Fatalf("Observe closed waiting for %s", what)
				}
				if ok(ld) {
					return ld
				}
				t.Logf("observed %+v waiting for %s", ld, what)
			case <-ctx.Done():
				t.Fatalf("Observe sent nothing waiting for %s", what)
			}
		}
	}
	next("no leader", func(ld dlock.Leader) bool { return ld.Err == nil && ld.Owner == "" })

	e := client(t, direct, prefix).Election(name)
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next("a", func(ld dlock.Leader) bool { return ld.Err == nil && ld.Value == "a" })
	if err := sub.Wait(ctx); err != nil {
		t.Fatalf("Wait after the grant: %v", err)
	}
	for changed(sub) { // the grant's events may come in more than one answer
	}

	proxy.Freeze()
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := client(t, direct, prefix).Election(name).Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Heal() // cuts the frozen connections: the clients reconnect

	werr := make(chan error, 1)
	go func() { werr <- sub.Wait(ctx) }()
	select {
	case err := <-werr:
		if !errors.Is(err, dlock.ErrBackendUnavailable) {
			t.Errorf("Wait after the connection dropped: %v, want an error matching ErrBackendUnavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after the connection dropped")
	}
	next("an error for the dropped connection", func(ld dlock.Leader) bool { return ld.Err != nil })
	ld := next("b", func(ld dlock.Leader) bool { return ld.Err == nil })
	if ld.Value != "b" || ld.Term != b.Token() || ld.Term <= a.Token() {
		t.Errorf("after the drop observed %+v, want b with term %d (> %d)", ld, b.Token(), a.Token())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next("no leader after b resigned", func(ld dlock.Leader) bool { return ld.Err == nil && ld.Owner == "" })
}

// changed reports whether sub has a change to report within 50 ms.
func changed(sub dlock.Subscription) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	return sub.Wait(ctx) == nil
}

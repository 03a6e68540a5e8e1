package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
)

// acquireN takes n locks on b directly and returns renewals of them to ttl.
func acquireN(t *testing.T, b dlock.Backend, prefix string, n int, ttl time.Duration) []dlock.Renewal {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	var rs []dlock.Renewal
	for i := range n {
		name := fmt.Sprint(prefix, i)
		g, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "batch-owner", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: "batch-owner", Token: g.Token, Handle: g.Handle}, TTL: ttl})
	}
	return rs
}

// checkBatch renews rs plus a stale hold and checks the results and the
// new TTLs.
func checkBatch(t *testing.T, b *dredis.Backend, prefix string, rs []dlock.Renewal) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	stale := rs[0]
	stale.Hold.Token--
	stale.Hold.Handle = nil
	errs := b.RenewBatch(ctx, append(rs, stale))
	for i, err := range errs[:len(rs)] {
		if err != nil {
			t.Errorf("renewal %d: %v", i, err)
		}
	}
	if err := errs[len(rs)]; !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("stale renewal: %v, want ErrLeaseLost", err)
	}
	infos, err := b.Inspect(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(rs) {
		t.Fatalf("Inspect lists %d locks, want %d", len(infos), len(rs))
	}
	for _, in := range infos {
		if in.TTL < 30*time.Second || in.Owner != "batch-owner" || in.Count != 1 {
			t.Errorf("after the batch renewal: %+v", in)
		}
	}
}

// TestRenewBatch: one script call renews all holds on one server.
func TestRenewBatch(t *testing.T) {
	srv := testserver.Redis(t)
	b := newBackend(t, srv.Addr())
	rs := acquireN(t, b, "batch-", 40, time.Minute)
	b.RenewBatch(ctxFor(t, time.Minute), rs[:2]) // loads the script
	mon := startMonitor(t, srv.Addr())
	checkBatch(t, b, "batch-", rs)
	if got := mon.commands(); !slices.Equal(got[:1], []string{"evalsha"}) || slices.Contains(got[1:], "evalsha") {
		t.Errorf("a batch renewal of %d holds and Inspect: the server got %q, want one evalsha", len(rs)+1, got)
	}
}

// TestClusterRenewBatch: on a Cluster, the batch is split by slot and sent
// as a pipeline; Inspect scans every master.
func TestClusterRenewBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Redis Cluster")
	}
	cl := testserver.RedisCluster(t, 3)
	b, err := dredis.Open(ctxFor(t, time.Minute), strings.Join(cl.Addrs(), ","), dredis.Cluster())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rs := acquireN(t, b, "cbatch-", 40, time.Minute)
	checkBatch(t, b, "cbatch-", rs)
	// Every master holds some of the locks.
	for i := range cl.Len() {
		n, err := cl.Node(i).Do(context.Background(), "DBSIZE")
		if err != nil || n.(int64) == 0 {
			t.Errorf("master %d holds %v keys (%v); the names should spread", i, n, err)
		}
	}
}

// TestSentinelWaitReplicas: through Sentinel, with WaitReplicas, a grant
// succeeds while the replica acknowledges, and fails and is given back
// when the replica is gone.
func TestSentinelWaitReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master, a replica and a Sentinel")
	}
	g := testserver.RedisSentinel(t)
	ctx := ctxFor(t, time.Minute)
	base := "redis+sentinel://" + strings.Join(g.SentinelAddrs(), ",") + "/" + g.MasterName()
	acked, err := dlock.Open(ctx, base+"?wait_replicas=1&wait_replicas_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer acked.Close()
	plain, err := dlock.Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if !strings.Contains(acked.String(), "sentinel "+g.MasterName()) {
		t.Errorf("String() = %q", acked.String())
	}
	l, err := acked.Mutex("acked").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with a live replica: %v", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Errorf("Extend with a live replica: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Replica().Kill(); err != nil {
		t.Fatal(err)
	}
	_, err = acked.Mutex("unacked").Lock(ctx)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("Lock without a replica: %v, want ErrBackendUnavailable about replicas", err)
	}
	l, err = plain.Mutex("unacked").TryLock(ctx)
	if err != nil {
		t.Fatalf("the unacknowledged grant was not given back: %v", err)
	}
	l.Unlock(ctx)
}

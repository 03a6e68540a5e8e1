package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// A store whose renewals fail fast (a refused port) is retried on the
// schedule, every TTL/20 (at most 1 s), not in a busy loop until the
// lease's deadline: before, each finished renewal woke the loop and the
// lease was due again at once (27,523 calls in 1.6 s against PostgreSQL).
func TestRenewalRetriesArePaced(t *testing.T) {
	const ttl = time.Second
	f := &flaky{Backend: mem.New()}
	f.setFail(fmt.Errorf("%w: connection refused", dlock.ErrBackendUnavailable))
	c := newClient(t, f, dlock.TTL(ttl))
	start := time.Now()
	l, err := c.Mutex("paced").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease not lost although every renewal failed")
	}
	elapsed := time.Since(start)
	n := int(f.renews.Load())
	// The first renewal is due at about TTL/3, then one retry per TTL/20:
	// allow twice the schedule plus a few, for a slow machine's timer.
	limit := 2*int(elapsed/(ttl/20)) + 5
	t.Logf("%d renewal attempts in %v (limit %d)", n, elapsed.Round(time.Millisecond), limit)
	if n > limit {
		t.Errorf("%d renewal attempts in %v against a store that fails fast; the schedule (TTL/20) allows about %d",
			n, elapsed.Round(time.Millisecond), int(elapsed/(ttl/20)))
	}
	if n < 2 {
		t.Errorf("only %d renewal attempts in %v: failed renewals were not retried", n, elapsed.Round(time.Millisecond))
	}
}

// A TTL above the backend's maximum is refused before it reaches the
// store, on Lock, TryLock and Extend; before, TTL(math.MaxInt64) was granted
// with a deadline 292 years away while SQL and Redis stores kept it for 1 ms.
func TestTTLAboveTheMaximumIsRefused(t *testing.T) {
	s := mem.NewStore()
	a := newClient(t, s.Backend())
	b := newClient(t, s.Backend())
	if got := a.MaxTTL(); got != dlock.MaxTTL {
		t.Fatalf("MaxTTL() of mem = %v, want dlock.MaxTTL %v", got, dlock.MaxTTL)
	}
	ctx := context.Background()
	for _, ttl := range []time.Duration{dlock.MaxTTL + 1, dlock.MaxTTL + time.Millisecond, 2562047 * time.Hour, math.MaxInt64} {
		for op, try := range map[string]func(*dlock.Mutex) (*dlock.Lease, error){
			"Lock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.Lock(ctx) }, "TryLock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.TryLock(ctx) },
		} {
			l, err := try(a.Mutex("big", dlock.TTL(ttl)))
			if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
				t.Fatalf("%s with TTL %v = %v, %v; want ErrInvalidOption", op, ttl, l, err)
			}
			if msg := err.Error(); !strings.Contains(msg, dlock.MaxTTL.String()) || !strings.Contains(msg, "mem") {
				t.Errorf("error %q names neither the maximum %v nor the backend", msg, dlock.MaxTTL)
			}
		}
	}
	// Nothing was written: the name is free.
	l, err := b.Mutex("big").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the refused calls: %v", err)
	}
	// The maximum itself is granted and keeps the lock.
	if err := l.Extend(ctx, math.MaxInt64); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Extend(math.MaxInt64) = %v, want ErrInvalidOption", err)
	}
	if err := l.Extend(ctx, dlock.MaxTTL); err != nil {
		t.Errorf("Extend(MaxTTL) = %v", err)
	}
	if _, err := a.Mutex("big").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock while held with the maximum TTL = %v, want ErrNotAcquired", err)
	}
	l.Unlock(ctx)
	// The largest MaxHold is no bound in practice: the deadline follows the
	// TTL, and renewals keep the TTL.
	l, err = a.Mutex("hold", dlock.TTL(time.Second), dlock.MaxHold(math.MaxInt64)).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with MaxHold(math.MaxInt64): %v", err)
	}
	if left := time.Until(l.Deadline()); left <= 0 || left > time.Second {
		t.Errorf("with MaxHold(math.MaxInt64) the deadline is %v away, want within the TTL of 1s", left)
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil || time.Until(l.Deadline()) <= time.Second {
		t.Errorf("Extend(2s) with MaxHold(math.MaxInt64): %v, deadline %v away", err, time.Until(l.Deadline()))
	}
	l.Unlock(ctx)
}

// limited is a backend with its own maximum TTL.
type limited struct{ dlock.Backend }

func (limited) MaxTTL() time.Duration { return 5 * time.Second }

func TestBackendMaximumTTL(t *testing.T) {
	c := newClient(t, limited{mem.New()})
	if got := c.MaxTTL(); got != 5*time.Second {
		t.Fatalf("MaxTTL() = %v, want the backend's 5s", got)
	}
	ctx := context.Background()
	_, err := c.Mutex("x", dlock.TTL(5*time.Second+time.Millisecond)).TryLock(ctx)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "5s") {
		t.Fatalf("TTL above the backend's maximum: %v, want ErrInvalidOption naming 5s", err)
	}
	l, err := c.Mutex("x", dlock.TTL(5*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatalf("TTL at the backend's maximum: %v", err)
	}
	l.Unlock(ctx)
}

// Namespaces are spaces of their own: before, Namespace("app") + "job" was
// the key "app/job", the same lock as the name "app/job" without one.
func TestNamespacesIsolate(t *testing.T) {
	s := mem.NewStore()
	ctx := context.Background()
	type pair struct{ ns, name string }
	pairs := []pair{
		{"", "app/job"}, {"app", "job"}, {"app/job", "x"}, {"app", "job/x"},
		{"", "\x1fapp\x1fjob"}, {"", "\x1f"}, {"", "\x1f\x1f"}, {"app\x1e", "job"}, {"", "job"},
	}
	var leases []*dlock.Lease
	clients := map[string]*dlock.Client{}
	for _, p := range pairs {
		c := clients[p.ns]
		if c == nil {
			var opts []dlock.Option
			if p.ns != "" {
				opts = append(opts, dlock.Namespace(p.ns))
			}
			c = newClient(t, s.Backend(), opts...)
			clients[p.ns] = c
		}
		// Every earlier pair is held by another owner: a pair that shared
		// its key would be refused. (mem's tokens come from one counter
		// per store since issue 13, so they cannot tell locks apart.)
		l, err := c.Mutex(p.name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q) in namespace %q while the others are held: %v", p.name, p.ns, err)
		}
		leases = append(leases, l)
	}
	// Inspect in a namespace shows its own locks by name; without one it
	// shows every lock, with its namespace.
	infos, err := clients["app"].Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, in.Namespace+"|"+in.Name)
	}
	if want := "app|job app|job/x"; strings.Join(sorted(got), " ") != want {
		t.Errorf("Inspect in namespace app = %q, want %q", sorted(got), want)
	}
	infos, err = clients[""].Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, in := range infos {
		got = append(got, in.Namespace+"|"+in.Name)
	}
	var want []string
	for _, p := range pairs {
		want = append(want, p.ns+"|"+p.name)
	}
	if strings.Join(sorted(got), " ") != strings.Join(sorted(want), " ") {
		t.Errorf("Inspect without a namespace = %q, want %q", sorted(got), sorted(want))
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	if _, err := dlock.New(mem.New(), dlock.Namespace("a\x1fb")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Namespace with the byte 0x1F: %v, want ErrInvalidOption", err)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// Owner ids follow the name rule at the root, so no backend sees a NUL
// (PostgreSQL answered a raw "invalid byte sequence"), and errors quote
// user input cut short: a 10 KB name was echoed whole.
func TestOwnerRuleAndCutEchoes(t *testing.T) {
	c := newClient(t, mem.New())
	ctx := context.Background()
	for _, id := range []string{"", "nul\x00owner", "\xff", strings.Repeat("o", dlock.MaxNameLen+1)} {
		if _, err := c.Mutex("o", dlock.Owner(id)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Owner(%q): %v, want ErrInvalidOption", id, err)
		}
	}
	l, err := c.Mutex("o", dlock.Owner(strings.Repeat("o", dlock.MaxNameLen))).TryLock(ctx)
	if err != nil {
		t.Fatalf("an owner of %d bytes: %v", dlock.MaxNameLen, err)
	}
	l.Unlock(ctx)

	long := strings.Repeat("n", 10<<10)
	_, err = c.Mutex(long).TryLock(ctx)
	if !errors.Is(err, dlock.ErrInvalidName) {
		t.Fatalf("a 10 KB name: %v, want ErrInvalidName", err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "10240 bytes") {
		t.Errorf("error for a 10 KB name is %d bytes (want it cut, with the length): %.300s", len(msg), msg)
	}
	_, err = c.Mutex("o", dlock.Owner(long)).TryLock(ctx)
	if msg := err.Error(); !errors.Is(err, dlock.ErrInvalidOption) || len(msg) > 300 || !strings.Contains(msg, "10240 bytes") {
		t.Errorf("error for a 10 KB owner is %d bytes (want it cut, with the length): %.300s", len(msg), msg)
	}
	// A cut never splits a character.
	_, err = c.Mutex(strings.Repeat("é", 200)).TryLock(ctx)
	if msg := err.Error(); !strings.Contains(msg, strings.Repeat("é", 32)+"\"…") {
		t.Errorf("error for a long name of 2-byte characters: %s", msg)
	}
}

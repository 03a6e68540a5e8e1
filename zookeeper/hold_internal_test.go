package zookeeper

import (
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestHoldSize keeps the backend's state of a held lease small: a Client
// holding many leases keeps one hold per lease (see BenchmarkHeld).
func TestHoldSize(t *testing.T) {
	if got := unsafe.Sizeof(hold{}); got > 80 {
		t.Errorf("a hold takes %d bytes, want at most 80 (a size class of Go's allocator): it is kept once per held lease", got)
	}
}

// TestHoldName checks that a hold finds its lock's name in its node's path,
// for names that escaping changes and under any root.
func TestHoldName(t *testing.T) {
	for _, root := range []string{DefaultRoot, "/a/b"} {
		b := newBackend(newConfig([]Option{Root(root)}), "test")
		for _, name := range []string{"billing/nightly", "a%2Fb", ".", "..", "x y", "ünï", "-_.~", "/", "a//b/"} {
			path := b.lockPath(name) + "/" + protectedPrefix + randHex(guidLen/2) + lockMarker + "0000000007"
			if got := (&hold{path: path}).name(); got != name {
				t.Errorf("root %q: the hold on %s has name %q, want %q", root, path, got, name)
			}
		}
	}
}

// TestHoldRegistry checks the slice the monitor finds the holds in:
// forgetting a hold, in any order, twice, or one never added, leaves the
// others each at its slot.
func TestHoldRegistry(t *testing.T) {
	b := newBackend(newConfig(nil), "test")
	hs := make([]*hold, 6)
	for i := range hs {
		hs[i] = &hold{path: "/dlock/n/" + string(rune('a'+i))}
		b.addHold(hs[i], time.Now().Add(time.Minute), verified{})
	}
	stray := &hold{path: "/dlock/stray"}
	check := func(want ...*hold) {
		t.Helper()
		if len(b.holds) != len(want) {
			t.Fatalf("%d holds registered, want %d", len(b.holds), len(want))
		}
		for i, h := range b.holds {
			if int(h.slot) != i+1 {
				t.Errorf("hold %s at index %d has slot %d", h.path, i, h.slot)
			}
			if !slices.Contains(want, h) {
				t.Errorf("hold %s is still registered", h.path)
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetLocked(hs[0]) // the first: the last moves into its place
	check(hs[1], hs[2], hs[3], hs[4], hs[5])
	b.forgetLocked(hs[0]) // again: nothing changes
	b.forgetLocked(stray) // never added
	check(hs[1], hs[2], hs[3], hs[4], hs[5])
	b.forgetLocked(hs[4]) // the last
	b.forgetLocked(hs[2])
	check(hs[1], hs[3], hs[5])
	for _, h := range hs {
		b.forgetLocked(h)
	}
	check()
	if hs[3].slot != 0 {
		t.Errorf("a forgotten hold has slot %d, want 0", hs[3].slot)
	}
}

package redis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/redisconn"
)

func TestEncodeName(t *testing.T) {
	var all strings.Builder
	for c := 1; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	for _, name := range []string{
		"plain", "a/b/../c d", "ünï/cödé 🔒", "%2F:*?[]{}\\'\"", "{", "}", "{x}", "%", "%%41", "\x01\x1f\x7f",
		all.String(),
	} {
		enc := encodeName(name)
		if strings.ContainsAny(enc, "{}*?[]\\") {
			t.Errorf("encodeName(%q) = %q keeps a brace or glob character", name, enc)
		}
		dec, err := decodeName(enc)
		if err != nil || dec != name {
			t.Errorf("decodeName(encodeName(%q)) = %q, %v", name, dec, err)
		}
		for i := range len(name) {
			if !strings.HasPrefix(enc, encodeName(name[:i])) {
				t.Fatalf("encoding of the prefix %q of %q is not a prefix of %q", name[:i], name, enc)
			}
		}
	}
	for _, bad := range []string{"%", "%4", "%zz", "a%G1"} {
		if _, err := decodeName(bad); err == nil {
			t.Errorf("decodeName(%q) accepted a bad escape", bad)
		}
	}
}

func TestSlot(t *testing.T) {
	if got := redisconn.Slot("123456789"); got != 0x31C3%16384 {
		t.Errorf("slot of the CRC16 check string = %d, want %d", got, 0x31C3%16384)
	}
	// CLUSTER KEYSLOT foo = 12182 (the Redis Cluster specification).
	if k := newKeys("dlock", "foo"); k.slot != 12182 {
		t.Errorf("slot of {foo} = %d, want 12182", k.slot)
	}
	// The fence key is in the lock's slot (on every topology).
	if k := newKeys("dlock", "foo"); redisconn.Slot(k.fence()[strings.Index(k.fence(), "{")+1:len(k.fence())-1]) != k.slot {
		t.Errorf("fence key %q is not in slot %d", k.fence(), k.slot)
	}
	k := newKeys("p", "a}b")
	for _, key := range []string{k.lock(), k.queue(), k.timeouts(), k.channel()} {
		open, close := strings.Index(key, "{"), strings.Index(key, "}")
		if key[open+1:close] != encodeName("a}b") {
			t.Errorf("key %q: hash tag %q, want %q", key, key[open+1:close], encodeName("a}b"))
		}
	}
}

// TestKeyNames: the keys of a lock, which share one string, are exactly
// the documented names: the fence key is the slot's, PREFIX:fence:{TAG},
// as redlock names it.
func TestKeyNames(t *testing.T) {
	var c keyCache
	c.prefix = "p"
	for _, name := range []string{"a", "order:81723", "x{y}"} {
		k := c.get(name)
		base := "p:{" + encodeName(name) + "}"
		got := []string{k.lock(), k.queue(), k.timeouts(), k.fence(), k.channel()}
		fence := "p:fence:{" + redisconn.SlotTag(redisconn.Slot(encodeName(name))) + "}"
		want := []string{base, base + ":queue", base + ":timeouts", fence, base + ":wake"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("keys of %q: %q, want %q", name, got, want)
		}
		for i, a := range k.all {
			if a != any(want[i]) {
				t.Errorf("script key %d of %q: %v, want %q", i, name, a, want[i])
			}
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"dlock", "app:locks", "a-b_c.d/e"} {
		if why := validPrefix(p); why != "" {
			t.Errorf("validPrefix(%q) = %q, want ok", p, why)
		}
	}
	for _, p := range []string{"", "a{b", "a}", "a*", "a?", "a[", "a\\", "a\nb", strings.Repeat("x", 65)} {
		if validPrefix(p) == "" {
			t.Errorf("validPrefix(%q) accepted it", p)
		}
	}
}

func TestVersionOK(t *testing.T) {
	for v, want := range map[string]bool{
		"7.0.15": true, "6.0.0": true, "6.2.14": true, "10.0.1": true, "7.2.4-rc1": true,
		"5.0.7": false, "4.0.14": false, "2.8.24": false, "garbage": true,
	} {
		if got := versionOK(v); got != want {
			t.Errorf("versionOK(%q) = %v, want %v", v, got, want)
		}
	}
}

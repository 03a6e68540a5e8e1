package dlock

import (
	"strings"
	"testing"
)

// TestKeyEncodingIsInjective checks on a table of tricky pairs that no two
// (namespace, name) pairs share a backend key and that decodeKey recovers
// each pair.
func TestKeyEncodingIsInjective(t *testing.T) {
	m := string(nsMark)
	nss := []string{"", "app", "app/job", "a", "app/", "/", "ü"}
	names := []string{"job", "app/job", "job/x", "x", m, m + m, m + "app" + m + "job", m + "job", "app" + m + "job", "/job", "a" + m}
	seen := map[string][2]string{}
	for _, ns := range nss {
		for _, name := range names {
			key := encodeKey(ns, name)
			if prev, dup := seen[key]; dup {
				t.Errorf("(%q, %q) and (%q, %q) share the key %q", prev[0], prev[1], ns, name, key)
			}
			seen[key] = [2]string{ns, name}
			gns, gname, ok := decodeKey(key)
			if !ok || gns != ns || gname != name {
				t.Errorf("decodeKey(encodeKey(%q, %q)) = %q, %q, %v", ns, name, gns, gname, ok)
			}
		}
	}
	if got := encodeKey("", "app/job"); got != "app/job" {
		t.Errorf("a name without a namespace changed its key: %q", got)
	}
}

// FuzzKeyEncoding checks that decodeKey inverts encodeKey for every valid
// namespace and name, which makes the encoding injective.
func FuzzKeyEncoding(f *testing.F) {
	f.Add("app", "job")
	f.Add("", "\x1fapp\x1fjob")
	f.Add("", "\x1f")
	f.Add("app/job", "x")
	f.Fuzz(func(t *testing.T, ns, name string) {
		if validName(name, MaxNameLen) != "" || ns != "" && (validName(ns, MaxNamespaceLen) != "" || strings.IndexByte(ns, nsMark) >= 0) {
			t.Skip()
		}
		key := encodeKey(ns, name)
		gns, gname, ok := decodeKey(key)
		if !ok || gns != ns || gname != name {
			t.Fatalf("decodeKey(encodeKey(%q, %q)) = %q, %q, %v", ns, name, gns, gname, ok)
		}
		if len(key) > MaxNameLen+MaxNamespaceLen+2 {
			t.Fatalf("key of %d bytes, above the bound documented for Request.Name", len(key))
		}
	})
}

package redisconn

import "strings"

// Escape returns s with every byte for which esc is true written as %XX
// (upper-case hex), the rest kept: the lock-name encoding of the redis and
// redlock key layouts, which differ only in esc. It works byte by byte, so
// the encoding of a prefix of s is a prefix of the encoding of s.
func Escape(s string, esc func(byte) bool) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if esc(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if esc(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// EncodeName escapes a lock name for use inside a hash tag and a SCAN
// pattern: the bytes { } % and the glob characters * ? [ ] \ as well as
// ASCII control bytes become %XX; everything else (including UTF-8) is
// kept. The packages redis and redlock both name a lock's keys with it,
// so that the two schemes on one server share a name's keys.
func EncodeName(name string) string { return Escape(name, NameEscapes) }

// NameEscapes reports whether EncodeName escapes c.
func NameEscapes(c byte) bool {
	switch c {
	case '{', '}', '%', '*', '?', '[', ']', '\\':
		return true
	}
	return c < 0x20 || c == 0x7f
}

// FenceKey returns the fence key of the names in a Cluster slot under
// prefix, PREFIX:fence:{TAG} (see [SlotTag]): it holds the highest token
// granted to any of them and is never deleted. The packages redis (on every
// topology) and redlock (on each master) raise the same key with the same
// rule (a new token is above it), so tokens of a name used through both
// schemes on one server only increase.
func FenceKey(prefix string, slot uint16) string {
	return prefix + ":fence:{" + SlotTag(slot) + "}"
}

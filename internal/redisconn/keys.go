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

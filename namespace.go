package dlock

import "strings"

// nsMark is the byte that marks a namespaced key on the backend. It is a
// control character (ASCII unit separator) that every backend stores after
// its own escaping, that a Namespace may not contain, and that names
// rarely start with.
const nsMark = '\x1f'

// encodeKey returns the backend key of name in namespace ns ("" for none):
//
//	ns != ""                   → M ns M name
//	ns == "", name starts with M → M M name
//	ns == "", otherwise        → name (unchanged: existing locks keep their keys)
//
// The encoding is injective, so no two (namespace, name) pairs share a key.
// Take the key's first bytes: a key that does not start with M is a plain
// name, the identity. A key that starts with M M is a plain name that
// starts with M: a namespaced key cannot start so, since its namespace is
// not empty and holds no M. Any other key starting with M is namespaced,
// and its namespace is the bytes up to the next M (a namespace holds no M),
// its name the rest. So decodeKey recovers (ns, name) from every key that
// encodeKey makes; see TestKeyEncodingIsInjective and FuzzKeyEncoding.
func encodeKey(ns, name string) string {
	switch {
	case ns != "":
		return string(nsMark) + ns + string(nsMark) + name
	case strings.HasPrefix(name, string(nsMark)):
		return string(nsMark) + name
	}
	return name
}

// decodeKey reverses encodeKey. ok is false for a key that encodeKey does
// not make (M and no second M): it is returned as the name.
func decodeKey(key string) (ns, name string, ok bool) {
	rest, marked := strings.CutPrefix(key, string(nsMark))
	switch {
	case !marked:
		return "", key, true
	case strings.HasPrefix(rest, string(nsMark)):
		return "", rest, true
	}
	ns, name, found := strings.Cut(rest, string(nsMark))
	if !found || ns == "" {
		return "", key, false
	}
	return ns, name, true
}

// Package redact hides the secrets of a backend's URL: the password before
// the '@' and the values of the query parameters that carry one
// (password=, sslpassword=, sentinel_password=, ...). Every message, log
// line and report that shows a URL shows it through [URL] or [String];
// dlock run gives its command the URL of [Strip].
package redact

import (
	"net/url"
	"strings"
)

// Mask is what a secret is replaced with (url.URL.Redacted's mask).
const Mask = "xxxxx"

// IsSecret reports whether the URL query parameter key carries a secret:
// its name contains password, passwd or secret, ends with token (not
// clock_tokens), or is pass, pwd or auth (ZooKeeper's scheme:credentials).
// The rule is wider than any one backend's parameters, so that a secret
// given under a parameter a backend refuses is hidden in the refusal too.
func IsSecret(key string) bool {
	k := strings.ToLower(key)
	switch k {
	case "pass", "pwd", "auth":
		return true
	}
	return strings.Contains(k, "password") || strings.Contains(k, "passwd") ||
		strings.Contains(k, "secret") || strings.HasSuffix(k, "token")
}

// URL returns u as text with every secret replaced by [Mask].
func URL(u *url.URL) string {
	v := *u
	if v.User != nil {
		if _, ok := v.User.Password(); ok {
			v.User = url.UserPassword(v.User.Username(), Mask)
		}
	}
	v.RawQuery = maskQuery(v.RawQuery)
	return v.String()
}

// String returns the URL raw with every secret replaced by [Mask]. A URL
// that does not parse is masked as well as its shape allows: the text
// between the first ':' after "//" and the last '@' of its authority, and
// the secret parameters of what follows the first '?'.
func String(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return URL(u)
	}
	s, query, hasQuery := strings.Cut(raw, "?")
	if _, rest, ok := strings.Cut(s, "//"); ok {
		auth, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			if colon := strings.Index(auth[:at], ":"); colon >= 0 {
				start := len(s) - len(rest) + colon + 1
				s = s[:start] + Mask + s[start+at-colon-1:]
			}
		}
	}
	if hasQuery {
		s += "?" + maskQuery(query)
	}
	return s
}

// Strip returns the URL raw without its secrets: the password removed
// from before the '@' (the user name kept) and the secret parameters
// left out. A URL that does not parse is returned masked (see [String]).
func Strip(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return String(raw)
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	var kept []string
	for _, seg := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		if !secretSeg(seg) {
			kept = append(kept, seg)
		}
	}
	u.RawQuery = strings.Join(kept, "&")
	return u.String()
}

// maskQuery returns the raw query with the value of each secret
// parameter replaced by [Mask], keeping everything else as it was
// (separators, order, bad escapes).
func maskQuery(raw string) string {
	var b strings.Builder
	for raw != "" {
		seg, rest := raw, ""
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			seg, rest = raw[:i], raw[i:]
		}
		b.WriteString(maskSeg(seg))
		if rest != "" {
			b.WriteByte(rest[0])
			rest = rest[1:]
		}
		raw = rest
	}
	return b.String()
}

// secretSeg reports whether a query segment "key=value" gives a secret.
func secretSeg(seg string) bool {
	key, _, _ := strings.Cut(seg, "=")
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	return IsSecret(key)
}

// maskSeg returns the segment with its value masked if it is a secret.
func maskSeg(seg string) string {
	key, _, hasValue := strings.Cut(seg, "=")
	if hasValue && secretSeg(seg) {
		return key + "=" + Mask
	}
	return seg
}

package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://u:S1@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://h:1/0?password=S1&dial_timeout=1s", "redis://h:1/0?password=xxxxx&dial_timeout=1s"},
		{"redis+sentinel://h/m?sentinel_password=S1&sentinel_username=u", "redis+sentinel://h/m?sentinel_password=xxxxx&sentinel_username=u"},
		{"postgres://u@h/db?sslpassword=S1;password=S2&sslmode=disable", "postgres://u@h/db?sslpassword=xxxxx;password=xxxxx&sslmode=disable"},
		{"postgres://h/db?PassWord=S1&pass%77ord=S2", "postgres://h/db?PassWord=xxxxx&pass%77ord=xxxxx"},
		{"zk://h/p?auth=digest:u:S1&clock_tokens=true", "zk://h/p?auth=xxxxx&clock_tokens=true"},
		{"x://h/?auth_token=S1&require_auth=md5&client_secret=S2", "x://h/?auth_token=xxxxx&require_auth=md5&client_secret=xxxxx"},
		// Does not parse (bad port, bad escape): masked by shape.
		{"redis://u:S1@h:x/0?password=S2&a=%zz", "redis://u:xxxxx@h:x/0?password=xxxxx&a=%zz"},
		{"mysql://u:p@ss:S1@h:bad/db", "mysql://u:xxxxx@h:bad/db"},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStrip(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://u:S1@h:1/0?password=S2&dial_timeout=1s", "redis://u@h:1/0?dial_timeout=1s"},
		{"postgres://h/db?sslpassword=S1", "postgres://h/db"},
		{"sqlite:///var/lib/dlock/locks.db", "sqlite:///var/lib/dlock/locks.db"},
	} {
		got := Strip(tc.in)
		if got != tc.want {
			t.Errorf("Strip(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "S1") || strings.Contains(got, "S2") {
			t.Errorf("Strip(%q) = %q keeps a secret", tc.in, got)
		}
	}
}

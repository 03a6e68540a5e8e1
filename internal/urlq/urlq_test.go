package urlq

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

func parse(t *testing.T, raw string) *Query {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return Parse("pg", u)
}

func TestGetters(t *testing.T) {
	q := parse(t, "pg://u:secret@h/db?table=x&waiter_timeout=2s&n=3&f=0.5&b=true&mode=session&sslmode=require")
	if v, ok := q.String("table"); !ok || v != "x" {
		t.Errorf("table = %q, %v", v, ok)
	}
	if d, ok := q.Duration("waiter_timeout"); !ok || d != 2*time.Second {
		t.Errorf("waiter_timeout = %v, %v", d, ok)
	}
	if n, ok := q.Int("n"); !ok || n != 3 {
		t.Errorf("n = %v, %v", n, ok)
	}
	if f, ok := q.Float("f"); !ok || f != 0.5 {
		t.Errorf("f = %v, %v", f, ok)
	}
	if b, ok := q.Bool("b"); !ok || !b {
		t.Errorf("b = %v, %v", b, ok)
	}
	if m, ok := q.Enum("mode", "lease", "session"); !ok || m != "session" {
		t.Errorf("mode = %v, %v", m, ok)
	}
	if _, ok := q.String("absent"); ok {
		t.Error("absent parameter reported given")
	}
	rest, err := q.Done(func(k string) bool { return k == "sslmode" })
	if err != nil {
		t.Fatal(err)
	}
	if rest.Encode() != "sslmode=require" {
		t.Errorf("rest = %q", rest.Encode())
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		read      func(q *Query)
	}{
		{"pg://h/db?table=x;foo=1", "query", nil},
		{"pg://h/db?table=x&table=y", "parameter table is given 2 times", func(q *Query) { q.String("table") }},
		{"pg://h/db?foo=1&bar=2", "unknown parameter bar, foo", nil},
		{"pg://h/db?waiter_timeout=2", `parameter waiter_timeout="2": not a duration`, func(q *Query) { q.Duration("waiter_timeout") }},
		{"pg://h/db?mode=x", "want lease or session", func(q *Query) { q.Enum("mode", "lease", "session") }},
		{"pg://h/db?n=x", "not a whole number", func(q *Query) { q.Int("n") }},
		{"pg://u:secret@h/db?zz=1", "unknown parameter zz", nil},
	} {
		q := parse(t, tc.raw)
		if tc.read != nil {
			tc.read(q)
		}
		_, err := q.Done(nil)
		if err == nil || !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pg URL") {
			t.Errorf("%s: err = %v, want ErrInvalidOption naming pg and %q", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the password is in the error: %v", tc.raw, err)
		}
	}
}

func TestRest(t *testing.T) {
	q := parse(t, "pg://h/db?table=x&a=1&b=2")
	q.String("table")
	if got := q.Rest().Encode(); got != "a=1&b=2" {
		t.Errorf("Rest = %q", got)
	}
}

func TestAdd(t *testing.T) {
	q := parse(t, "pg://h/db?connect_timeout=7&wait=2s&n=x")
	var opts []string
	opt := func(name string) func(time.Duration) string {
		return func(d time.Duration) string { return name + "=" + d.String() }
	}
	Add(&opts, "connect_timeout", ParsedBy(q, parseSeconds), opt("connect"))
	Add(&opts, "wait", q.Duration, opt("wait"))
	Add(&opts, "absent", q.Duration, opt("absent"))
	double := func(s string) (int, error) {
		if s != "x" {
			return 0, errors.New("want x")
		}
		return 2, nil
	}
	Add(&opts, "n", ParsedBy(q, double), func(n int) string { return strings.Repeat("n", n) })
	want := []string{"connect=7s", "wait=2s", "nn"}
	if strings.Join(opts, " ") != strings.Join(want, " ") {
		t.Errorf("options %q, want %q", opts, want)
	}
	if _, err := q.Done(nil); err != nil {
		t.Errorf("Done: %v", err)
	}

	q = parse(t, "pg://h/db?connect_timeout=soon")
	opts = nil
	Add(&opts, "connect_timeout", ParsedBy(q, parseSeconds), opt("connect"))
	if _, err := q.Done(nil); len(opts) != 0 || !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "connect_timeout") {
		t.Errorf("bad connect_timeout: options %q, Done %v; want none and an ErrInvalidOption naming it", opts, err)
	}
}

// parseSeconds parses a whole number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	n, err := strconv.Atoi(s)
	return time.Duration(n) * time.Second, err
}

// Package urlq reads the query of a backend's URL by one rule for every
// backend: dlock's own parameters through typed getters, the driver's
// parameters passed on by name, and anything else an error.
//
// # Rules
//
//   - A parameter given twice is an error (no "last one wins" guessing).
//   - A query that does not parse (a ';' separator, a bad escape) is an
//     error, not a silently shorter query.
//   - A parameter nobody took and the backend does not pass to its driver
//     is an error naming it.
//
// Every error matches dlock.ErrInvalidOption and names the backend and the
// URL (with its secrets masked by package redact).
package urlq

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/redact"
)

// Query is a URL's query being read. The getters record the first error;
// Done reports it.
type Query struct {
	backend string
	url     string // its secrets masked, for messages
	vals    url.Values
	taken   map[string]bool
	err     error
}

// Parse starts reading u's query for the named backend ("postgres",
// "redis", ...).
func Parse(backend string, u *url.URL) *Query {
	q := &Query{backend: backend, url: redact.URL(u), taken: map[string]bool{}}
	q.vals, q.err = url.ParseQuery(u.RawQuery)
	if q.err != nil {
		q.err = q.errorf("query: %v", q.err)
		q.vals = url.Values{}
	}
	return q
}

// Errorf returns an ErrInvalidOption error about the URL being read, for
// the backend's own checks of its address part.
func (q *Query) Errorf(format string, args ...any) error {
	return q.errorf(format, args...)
}

func (q *Query) errorf(format string, args ...any) error {
	return errkind.Errorf(dlock.ErrInvalidOption, "%s URL %q: %s", q.backend, q.url, fmt.Sprintf(format, args...))
}

func (q *Query) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// String returns the parameter's value and whether it was given.
func (q *Query) String(key string) (string, bool) {
	vs, ok := q.vals[key]
	if !ok {
		return "", false
	}
	q.taken[key] = true
	if len(vs) > 1 {
		q.fail(q.errorf("parameter %s is given %d times", key, len(vs)))
		return "", false
	}
	return vs[0], true
}

// Parsed returns parse(value) for a given parameter; an error of parse is
// reported as the parameter's.
func Parsed[T any](q *Query, key string, parse func(string) (T, error)) (T, bool) {
	var zero T
	s, ok := q.String(key)
	if !ok {
		return zero, false
	}
	v, err := parse(s)
	if err != nil {
		q.fail(q.errorf("parameter %s=%q: %v", key, s, err))
		return zero, false
	}
	return v, true
}

// ParsedBy returns a getter, for [Add], that reads a parameter with parse
// (see [Parsed]).
func ParsedBy[T any](q *Query, parse func(string) (T, error)) func(key string) (T, bool) {
	return func(key string) (T, bool) { return Parsed(q, key, parse) }
}

// Add appends to opts the option that set makes of the parameter key, if
// it is given, as read by get (one of q's getters, or [ParsedBy]):
//
//	urlq.Add(&opts, "node_timeout", q.Duration, NodeTimeout)
func Add[T, O any](opts *[]O, key string, get func(key string) (T, bool), set func(T) O) {
	if v, ok := get(key); ok {
		*opts = append(*opts, set(v))
	}
}

// Duration reads a Go duration ("500ms", "10s").
func (q *Query) Duration(key string) (time.Duration, bool) {
	return parsedAs(q, key, time.ParseDuration, "not a duration such as 10s or 500ms")
}

// Int reads a decimal integer.
func (q *Query) Int(key string) (int, bool) {
	return parsedAs(q, key, strconv.Atoi, "not a whole number")
}

// Float reads a decimal number.
func (q *Query) Float(key string) (float64, bool) {
	return parsedAs(q, key, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, "not a number")
}

// Bool reads true or false (also 1/0, t/f as strconv.ParseBool).
func (q *Query) Bool(key string) (bool, bool) {
	return parsedAs(q, key, strconv.ParseBool, "not true or false")
}

// parsedAs is Parsed with a parser from the standard library, whose error
// is replaced by want, a short description of a good value.
func parsedAs[T any](q *Query, key string, parse func(string) (T, error), want string) (T, bool) {
	return Parsed(q, key, func(s string) (T, error) {
		v, err := parse(s)
		if err != nil {
			var zero T
			return zero, errors.New(want)
		}
		return v, nil
	})
}

// Enum reads one of the allowed values.
func (q *Query) Enum(key string, allowed ...string) (string, bool) {
	return Parsed(q, key, func(s string) (string, error) {
		if !slices.Contains(allowed, s) {
			return "", fmt.Errorf("want %s", strings.Join(allowed, " or "))
		}
		return s, nil
	})
}

// Rest returns the parameters nobody took, for a backend that passes them
// all to its driver; Done with pass reporting true is the same check.
func (q *Query) Rest() url.Values {
	rest := url.Values{}
	for k, vs := range q.vals {
		if !q.taken[k] {
			rest[k] = vs
		}
	}
	return rest
}

// Done ends the reading: it returns the parameters nobody took that pass
// accepts (the driver's, by name; pass may be nil), and the first error:
// of parsing, of a getter, or a parameter neither taken nor passed on.
func (q *Query) Done(pass func(key string) bool) (url.Values, error) {
	rest := url.Values{}
	var unknown []string
	for k, vs := range q.vals {
		switch {
		case q.taken[k]:
		case pass != nil && pass(k):
			rest[k] = vs
		default:
			unknown = append(unknown, k)
		}
	}
	if q.err != nil {
		return nil, q.err
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, q.errorf("unknown parameter %s", strings.Join(unknown, ", "))
	}
	return rest, nil
}

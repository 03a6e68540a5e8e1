// Package opt is what every Option type of dlock shares: applying a
// list of options, and collecting what is wrong with their values so that
// the constructor reports all of it in one error.
package opt

import (
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock/internal/errkind"
)

// Option is what a package's Option type embeds to be sealed:
//
//	// An Option configures a Backend.
//	type Option interface{ opt.Option[config] }
//
// Its method is unexported, so [Func] is its only implementation, and as
// config is the package's unexported type, only the package's own
// constructors make its options.
type Option[C any] interface{ apply(*C) }

// Func is an option as a function that sets its value in the config C.
type Func[C any] func(*C)

func (f Func[C]) apply(c *C) { f(c) }

// Apply applies opts to c in order, skipping nil ones.
func Apply[C any, O Option[C]](c *C, opts []O) {
	for _, o := range opts {
		if any(o) != nil { // O is an interface: a nil one has no apply
			o.apply(c)
		}
	}
}

// Problems are what is wrong with the option values given, in the order
// found.
type Problems []string

// Check records the problem that format and args describe unless ok, and
// returns ok, so that an option keeps its value only when it is good:
//
//	if c.errs.Check(d >= 0, "connect timeout %v is negative", d) {
//		c.connectTimeout = d
//	}
func (p *Problems) Check(ok bool, format string, args ...any) bool {
	if !ok {
		*p = append(*p, fmt.Sprintf(format, args...))
	}
	return ok
}

// String joins the problems with "; ".
func (p Problems) String() string { return strings.Join(p, "; ") }

// Err returns the problems as one error matching kind (the caller's
// dlock.ErrInvalidOption), its text prefixed with the backend's name:
// "etcd: nil logger; connect timeout -1s is negative". It returns nil if
// there are none.
func (p Problems) Err(kind error, backend string) error {
	if len(p) == 0 {
		return nil
	}
	return errkind.Errorf(kind, "%s: %s", backend, p)
}

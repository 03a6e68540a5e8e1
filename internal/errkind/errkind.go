// Package errkind makes the errors backends return: an error that matches
// one of dlock's sentinels (its kind) without repeating the sentinel's
// text, since the Client prints the kind itself.
package errkind

import "fmt"

// Error matches Kind (and, through Cause, any %w operands of the message)
// and reads as Cause alone.
type Error struct {
	Kind  error
	Cause error
}

func (e *Error) Error() string   { return e.Cause.Error() }
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Cause} }

// Errorf returns an error matching kind whose text is the formatted detail.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Cause: fmt.Errorf(format, args...)}
}

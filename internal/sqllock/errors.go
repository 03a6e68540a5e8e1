package sqllock

import "fmt"

// kindError is an error that matches a dlock sentinel (kind) without
// repeating its text: the Client prints the kind itself ("dlock: unlock
// "x" on sqlite /p.db: lease lost: " + this error's text), so the text is
// only the detail.
type kindError struct {
	kind  error
	cause error
}

func (e *kindError) Error() string   { return e.cause.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.cause} }

// errorf returns an error matching kind (and any %w operands) whose text is
// the formatted detail.
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, cause: fmt.Errorf(format, args...)}
}

// Errorf is errorf for the backends built on the engine.
func Errorf(kind error, format string, args ...any) error { return errorf(kind, format, args...) }

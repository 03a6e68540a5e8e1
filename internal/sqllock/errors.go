package sqllock

import "github.com/dlock-dev/dlock/internal/errkind"

// errorf returns an error matching kind (and any %w operands) whose text is
// the formatted detail; see package errkind.
func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// Errorf is errorf for the backends built on the engine.
func Errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

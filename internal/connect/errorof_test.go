package connect

import (
	"errors"
	"fmt"
	"testing"
)

type codeError struct{ code int }

func (e *codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestErrorOf(t *testing.T) {
	auth := ErrorOf(func(e *codeError) bool { return e.code == 1045 })
	answer := ErrorOf[*codeError](nil)
	for _, c := range []struct {
		err          error
		auth, answer bool
	}{
		{&codeError{1045}, true, true},
		{fmt.Errorf("ping: %w", &codeError{1045}), true, true},
		{&codeError{1064}, false, true},
		{errors.New("code 1045"), false, false},
		{nil, false, false},
	} {
		if got := auth(c.err); got != c.auth {
			t.Errorf("auth test of %v = %v, want %v", c.err, got, c.auth)
		}
		if got := answer(c.err); got != c.answer {
			t.Errorf("answer test of %v = %v, want %v", c.err, got, c.answer)
		}
	}
}

package dlock_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-dev/dlock"
)

// TestErrorSaysEachPrefixOnce: the kind and the "dlock: " prefix appear
// once, wherever in the cause a backend wrapped the sentinel.
func TestErrorSaysEachPrefixOnce(t *testing.T) {
	dial := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{fmt.Errorf("%w: %w", dlock.ErrBackendUnavailable, dial),
			"dlock: open on redis x: backend unavailable: dial tcp 127.0.0.1:1: connect: connection refused"},
		{fmt.Errorf("redis 127.0.0.1:1: %w: %w", dlock.ErrBackendUnavailable, dial),
			"dlock: open on redis x: backend unavailable: redis 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused"},
		{fmt.Errorf("redis 127.0.0.1:1: %w", dlock.ErrBackendUnavailable),
			"dlock: open on redis x: backend unavailable: redis 127.0.0.1:1"},
		{fmt.Errorf("node a: %w: %w", dlock.ErrNoQuorum, dial),
			"dlock: open on redis x: backend unavailable: node a: no quorum: dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		e := &dlock.Error{Op: "open", Backend: "redis x", Kind: dlock.ErrBackendUnavailable, Err: tc.cause}
		if got := e.Error(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

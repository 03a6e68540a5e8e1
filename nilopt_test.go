package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// TestNilOptionIsInvalid: a nil Option (a conditional option left unset)
// is ErrInvalidOption naming it, from New, Open and a Mutex, not a panic.
func TestNilOptionIsInvalid(t *testing.T) {
	var none dlock.Option
	if _, err := dlock.New(mem.New(), dlock.TTL(dlock.DefaultTTL), none); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "option 2 of 2 is nil") {
		t.Errorf("New with a nil option: %v, want ErrInvalidOption naming option 2", err)
	}
	if _, err := dlock.Open(context.Background(), "mem://", none); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Open with a nil option: %v, want ErrInvalidOption", err)
	}
	c, err := dlock.New(mem.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Mutex("m", none).TryLock(context.Background()); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TryLock of a Mutex with a nil option: %v, want ErrInvalidOption", err)
	}
}

package connect

import (
	"context"
	"net/url"

	"github.com/dlock-dev/dlock"
)

// Register registers each scheme with dlock.Register as Opener(parse,
// open), the one form every backend's URL takes.
func Register[O any, B dlock.Backend](schemes []string, parse func(*url.URL) (string, []O, error),
	open func(context.Context, string, ...O) (B, error)) {
	for _, s := range schemes {
		dlock.Register(s, Opener(parse, open))
	}
}

// Opener returns the backend's ParseURL followed by its Open, as an
// OpenFunc: what dlock.Open calls for the backend's schemes.
func Opener[O any, B dlock.Backend](parse func(*url.URL) (string, []O, error),
	open func(context.Context, string, ...O) (B, error)) dlock.OpenFunc {
	return func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
		addr, opts, err := parse(u)
		if err != nil {
			return nil, err
		}
		b, err := open(ctx, addr, opts...)
		if err != nil {
			return nil, err // not b: a nil *Backend in a non-nil interface
		}
		return b, nil
	}
}

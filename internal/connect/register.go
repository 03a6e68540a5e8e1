package connect

import (
	"context"
	"net/url"

	"github.com/dlock-dev/dlock"
)

// Register registers each scheme with dlock.Register as the backend's
// ParseURL followed by its Open, the one form every backend's URL takes.
func Register[O any, B dlock.Backend](schemes []string, parse func(*url.URL) (string, []O, error),
	open func(context.Context, string, ...O) (B, error)) {
	for _, s := range schemes {
		dlock.Register(s, func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
			addr, opts, err := parse(u)
			if err != nil {
				return nil, err
			}
			b, err := open(ctx, addr, opts...)
			if err != nil {
				return nil, err // not b: a nil *Backend in a non-nil interface
			}
			return b, nil
		})
	}
}

package redlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Detacher = (*Backend)(nil)

// CanDetach says yes: a hold is a key with an expiry that the server keeps
// after the client is gone (for dlock.MinHold).
func (b *Backend) CanDetach() bool { return true }

// Detach leaves hold h to expire ttl from now by the server's clock: a
// renewal for that long, and no release.
func (b *Backend) Detach(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	return b.Renew(ctx, h, ttl)
}

package sqllock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Detacher = (*Backend)(nil)

// CanDetach says whether holds outlive the client (for dlock.MinHold): in
// lease-table mode a row keeps its expiry after the client is gone; in
// session mode the connection's end frees the lock, so no.
func (b *Backend) CanDetach() bool { return b.s == nil }

// Detach leaves hold h to expire ttl from now by the database's clock: a
// renewal for that long, and no release.
func (b *Backend) Detach(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	return b.Renew(ctx, h, ttl)
}

package postgres

import "github.com/dlock-dev/dlock/internal/sqllock"

// Shell returns b's SQL shell, for the tests of its pool.
func Shell(b *Backend) *sqllock.Backend { return b.shell }

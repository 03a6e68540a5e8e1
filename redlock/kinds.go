package redlock

import (
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Granter = (*Backend)(nil)

// CanGrant refuses every kind but the mutex (see "Semaphores and
// read-write locks" in the package doc): majority quorums cannot bound a
// count above 1.
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	return fmt.Errorf("%w: Redlock cannot keep a %s: with majority quorums, a count above 1 is not bounded "+
		"(3 masters, a limit of 2: permits granted by masters {1,2}, {2,3} and {1,3} put 3 out while each master counts 2); "+
		"use a single Redis (redis://) or another store", errors.ErrUnsupported, dlock.Shape(kind, limit))
}

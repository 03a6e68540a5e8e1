package redlock

import (
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Granter = (*Backend)(nil)

// CanGrant refuses every kind but the mutex (see "Semaphores and
// read-write locks" and "Elections and watching" in the package doc):
// majority quorums cannot bound a count above 1, and an election's value
// would need a majority read and versioned writes the backend does not
// have.
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	if kind == dlock.KindElection {
		return fmt.Errorf("%w: Redlock does not hold elections: a leader's value must be read from a majority of masters "+
			"and a Proclaim that reaches only a minority leaves them disagreeing with nothing to order the values by, "+
			"and the backend has neither a majority read nor versioned values; "+
			"use a single Redis (redis://) or a consensus store (zookeeper, etcd)", errors.ErrUnsupported)
	}
	return fmt.Errorf("%w: Redlock cannot keep a %s: with majority quorums, a count above 1 is not bounded "+
		"(3 masters, a limit of 2: permits granted by masters {1,2}, {2,3} and {1,3} put 3 out while each master counts 2); "+
		"use a single Redis (redis://) or another store", errors.ErrUnsupported, dlock.Shape(kind, limit))
}

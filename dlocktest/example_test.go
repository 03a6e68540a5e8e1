package dlocktest_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/mem"
)

// A backend's conformance test: the factory connects a new backend to one
// store each time it is called, as separate processes would. mem's stands
// in here for a server's.
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		store := mem.NewStore()
		dlocktest.Run(t, func(testing.TB) dlock.Backend { return store.Backend() })
	}
}

package mem_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/mem"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	s := mem.NewStore()
	dlocktest.Run(t, func(testing.TB) dlock.Backend { return s.Backend() })
}

func BenchmarkMem(b *testing.B) {
	s := mem.NewStore()
	dlocktest.Bench(b, func(testing.TB) dlock.Backend { return s.Backend() })
}

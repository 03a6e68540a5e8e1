package dlocktest

import "testing"

// Bench runs the standard benchmark workloads on backends made by
// newBackend.
func Bench(b *testing.B, newBackend Factory) {}

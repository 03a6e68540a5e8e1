package verify

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the package starts (the resource's, the proxies') ends
// with its owner.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

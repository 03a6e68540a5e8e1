package etcd_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/opentest"
)

// TestOpenFails: Open of an etcd:// URL that reaches no etcd returns
// within its context and says why. Before, every case said only "no
// answer from ... within 5s".
func TestOpenFails(t *testing.T) {
	opentest.Run(t, opentest.Cases(t, "etcd", "not an etcd server", opentest.OtherServer(t),
		func(addr, q string) string { return "etcd://" + addr + "?" + q }))
}

package zookeeper_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/opentest"
)

// TestOpenFails: Open of a zk:// URL that reaches no ZooKeeper returns
// within its context and says why. Before, a port where another server
// listens (or nothing answers) held Open for about 200 s (go-zookeeper's
// handshake read of ten read timeouts), whatever the context.
func TestOpenFails(t *testing.T) {
	opentest.Run(t, opentest.Cases(t, "zookeeper", "not a ZooKeeper server", opentest.OtherServer(t),
		func(addr, q string) string { return "zk://" + addr + "?" + q }))
}

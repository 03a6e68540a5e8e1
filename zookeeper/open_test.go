package zookeeper_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock"

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

// TestOpenRefusedFast: Open of a port where nothing listens fails with
// ErrBackendUnavailable, saying so, without waiting for its connect
// timeout (go-zookeeper dials the servers again every second until
// then). Before, it took the whole 10 s. The bound is half the timeout: a
// behaviour check, not a speed one.
func TestOpenRefusedFast(t *testing.T) {
	a, b := opentest.ClosedPort(t), opentest.ClosedPort(t)
	for _, addr := range []string{a, a + "," + b} {
		opentest.Check(t, opentest.Case{URL: "zk://" + addr, Addr: addr, Backend: "zookeeper", Reason: "connection refused",
			Timeout: time.Minute, Bound: dlock.DefaultConnectTimeout / 2})
	}
}

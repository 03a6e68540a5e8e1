package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestOpenFails: Open of a redlock:// URL fails, within its context and
// saying why for each master, when no quorum of masters answers; one
// failed master of three is fine. Before, Open never contacted the masters
// and the first Lock failed instead.
func TestOpenFails(t *testing.T) {
	g := testserver.RedisN(t, 2)
	pg := testserver.Postgres(t).Addr()
	refused, silent, silent2 := opentest.ClosedPort(t), opentest.Silent(t), opentest.Silent(t)
	for _, c := range []opentest.Case{
		{URL: "redlock://" + refused + "," + silent + "," + g.Node(0).Addr(), Addr: refused, Reason: "connection refused"},
		{URL: "redlock://" + pg + "," + refused + "," + g.Node(0).Addr(), Addr: pg, Reason: "not a Redis server"},
		{URL: "redlock://" + silent + "," + silent2 + "," + g.Node(0).Addr(), Addr: silent, Reason: "no Redis answer within the driver's own timeout"},
		{URL: "redlock://" + silent + "," + silent2 + "," + g.Node(0).Addr() + "?node_timeout=5s&connect_timeout=500ms", Addr: silent,
			Reason: "within connect_timeout 500ms", Bound: 3 * time.Second, Timeout: time.Minute},
	} {
		c.Backend = "redlock"
		t.Run(c.URL, func(t *testing.T) {
			opentest.Check(t, c)
		})
	}
	c, err := dlock.Open(t.Context(), "redlock://"+silent+","+strings.Join(g.Addrs(), ",")+"?connect_timeout=1m")
	if err != nil {
		t.Fatalf("Open with one of three masters silent: %v", err)
	}
	c.Close()
	_, err = dlock.Open(t.Context(), "redlock://"+refused+","+silent+","+g.Node(0).Addr())
	if !errors.Is(err, dlock.ErrNoQuorum) {
		t.Errorf("Open without a quorum: %v; want an error matching ErrNoQuorum", err)
	}
}

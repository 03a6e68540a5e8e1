package redis_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestOpenFails: Open of a redis:// URL that reaches no usable Redis
// returns within its context and says why, once, with nothing on stderr.
// Before, a refused port printed four lines of go-redis's logger and said
// "backend unavailable" twice.
func TestOpenFails(t *testing.T) {
	authSrv := testserver.Redis(t)
	if _, err := authSrv.Do(context.Background(), "CONFIG", "SET", "requirepass", "right"); err != nil {
		t.Fatal(err)
	}
	auth := authSrv.Addr()
	refused := opentest.ClosedPort(t)
	cases := opentest.Cases(t, "redis", "not a Redis server", testserver.Postgres(t).Addr(),
		func(addr, q string) string { return "redis://" + addr + "?" + q })
	cases = append(cases,
		opentest.Case{URL: "redis://:wrong@" + auth, Addr: auth, Backend: "redis", Reason: "authentication failed"},
		opentest.Case{URL: "redis+cluster://" + refused, Addr: refused, Backend: "redis cluster", Reason: "connection refused"})
	opentest.Run(t, cases)
}

package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestSessionFrozenHolder: in session mode, a holder whose connection
// goes quiet (a frozen process, a partition: the proxy drops everything
// and keeps the server's side open) loses its lock to another client
// soon after its TTL, not after the server's wait_timeout, as in
// PostgreSQL's session mode. Before, the other client waited for
// wait_timeout (60 s here); the limit below is only that.
func TestSessionFrozenHolder(t *testing.T) {
	const waitTimeout = 60 * time.Second
	srv := testserver.MariaDB(t, testserver.WithArgs("--wait-timeout=60"))
	proxy := testserver.NewProxy(t, srv.Addr())
	holder := sessionClient(t, strings.Replace(srv.DSN(), srv.Addr(), proxy.Addr(), 1))
	other := sessionClient(t, srv.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := holder.Mutex("frozen", dlock.TTL(2*time.Second)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Freeze()
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, waitTimeout-5*time.Second)
	defer wcancel()
	l, err := other.Mutex("frozen", dlock.TTL(2*time.Second)).Lock(wctx)
	if err != nil {
		t.Fatalf("Lock behind a frozen holder (TTL 2s, wait_timeout %v): %v", waitTimeout, err)
	}
	t.Logf("granted %v after the holder froze", time.Since(start).Round(time.Millisecond))
	l.Unlock(ctx)
}

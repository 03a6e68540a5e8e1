package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestOpenFails: Open of a postgres:// URL that reaches no usable
// PostgreSQL returns within its context and says why. Before, a port
// where Redis listens waited pgx's 10 s connect timeout whatever the
// context and said only "tls error: timeout".
func TestOpenFails(t *testing.T) {
	auth := passwordServer(t)
	cases := opentest.Cases(t, "postgres", "not a PostgreSQL server", opentest.OtherServer(t),
		func(addr, q string) string { return "postgres://postgres@" + addr + "/postgres?" + q })
	cases = append(cases,
		opentest.Case{URL: "postgres://app:wrong@" + auth + "/postgres?sslmode=disable", Addr: auth, Backend: "postgres", Reason: "authentication failed"},
		opentest.Case{URL: "postgres://app:right@" + auth + "/postgres?sslmode=require", Addr: auth, Backend: "postgres", Reason: "TLS handshake failed"})
	opentest.Run(t, cases)
}

// passwordServer starts a PostgreSQL where the role app logs in over TCP
// with the password "right".
func passwordServer(t *testing.T) string {
	t.Helper()
	srv := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := srv.Query(ctx, "postgres", "SHOW hba_file")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE ROLE app LOGIN PASSWORD 'right'",
		"COPY (SELECT unnest(ARRAY['local all all trust', 'host all postgres 127.0.0.1/32 trust', 'host all all 127.0.0.1/32 scram-sha-256'])) TO '" + rows[0][0] + "'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := srv.Query(ctx, "postgres", q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return srv.Addr()
}

package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestOpenFails: Open of a mysql:// URL that reaches no usable MySQL
// returns within its context and says why. Before, a port where Redis
// listens waited the whole context (the CLI's 30 s) and said only
// "context deadline exceeded".
func TestOpenFails(t *testing.T) {
	srv := testserver.MariaDB(t)
	for _, q := range []string{`CREATE USER 'pwuser'@'%' IDENTIFIED BY 'right'`, `GRANT ALL ON test.* TO 'pwuser'@'%'`} {
		if _, err := srv.Query(context.Background(), "", q); err != nil {
			t.Fatal(err)
		}
	}
	url := func(addr, q string) string { return "mysql://root@" + addr + "/test?" + q }
	cases := opentest.Cases(t, "mysql", "not a MySQL server", opentest.OtherServer(t), url)
	silent := opentest.Silent(t)
	cases = append(cases,
		opentest.Case{URL: url(silent, "timeout=500ms"), Addr: silent, Reason: "within connect_timeout 500ms", Timeout: time.Minute, Bound: 3 * time.Second},
		opentest.Case{URL: "mysql://pwuser:wrong@" + srv.Addr() + "/test", Addr: srv.Addr(), Reason: "authentication failed"},
		opentest.Case{URL: "mysql://root@" + srv.Addr() + "/nosuchdb", Addr: srv.Addr(), Reason: "the server answered with an error"})
	for i := range cases {
		cases[i].Backend = "mysql"
	}
	opentest.Run(t, cases)
}

package sqllock

import (
	"context"
	"database/sql"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
)

// SetupTimeout bounds a backend's New, which takes no context: checking
// the server and creating the tables.
const SetupTimeout = 30 * time.Second

// ConnectTimeout returns the connect timeout of Open: the ConnectTimeout
// option's if given, else dsn's own (0: the DSN sets none), else
// [dlock.DefaultConnectTimeout].
func (o Options) ConnectTimeout(dsn time.Duration) time.Duration {
	switch {
	case o.Connect != nil:
		return *o.Connect
	case dsn == 0:
		return dlock.DefaultConnectTimeout
	}
	return dsn
}

// Ping checks that the server behind db answers within ctx and timeout.
// On failure it closes db and returns srv's explanation of the error, for
// the server at addr, from what probe saw while connecting.
func Ping(ctx context.Context, db *sql.DB, timeout time.Duration, srv connect.Server, addr string, probe *connect.Probe) error {
	pctx, cancel := connect.Bound(ctx, timeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		err := srv.Explain(pctx, addr, probe, err)
		db.Close()
		return err
	}
	probe.Done()
	return nil
}

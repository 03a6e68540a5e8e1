package sqllock

import (
	"context"
	"database/sql"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/opt"
)

// SetupTimeout bounds a backend's New, which takes no context: checking
// the server and creating the tables.
const SetupTimeout = 30 * time.Second

// OnClient runs make, the work of a backend's New on a client the caller
// opened (a *sql.DB, a pool), bounded by [SetupTimeout] since New takes no
// context. A nil client (isNil; what names its type) is refused like a bad
// option, with an error matching dlock.ErrInvalidOption; opts are
// resolved as by [Resolve] and given to make.
func OnClient[O Option, B any](backend, what string, isNil bool, opts []O,
	make func(ctx context.Context, o Options) (B, error)) (B, error) {
	o, err := resolveOn(backend, what, isNil, opts)
	if err != nil {
		var none B
		return none, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	return make(ctx, o)
}

// MigrateOn is a backend's Migrate: [Migrate] for the table that opts
// name, on db (nil is refused like a bad option).
func MigrateOn[O Option](ctx context.Context, db *sql.DB, backend string, d Dialect, opts []O) error {
	o, err := resolveOn(backend, "*sql.DB", db == nil, opts)
	if err != nil {
		return err
	}
	return Migrate(ctx, db, d, o.Table)
}

// resolveOn is [Resolve] for a function on a client the caller opened: a
// nil one (isNil; what names its type) is one of the problems reported.
func resolveOn[O Option](backend, what string, isNil bool, opts []O) (Options, error) {
	o := DefaultOptions()
	o.Check(!isNil, "nil %s", what)
	opt.Apply(&o, opts)
	return o, o.Err(backend)
}

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

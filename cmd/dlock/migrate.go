package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/dlock-dev/dlock"
)

// migrateTimeout bounds dlock migrate's work on the backend.
const migrateTimeout = 2 * time.Minute

func init() {
	commands = append(commands, &command{
		name:     "migrate",
		synopsis: "dlock migrate [--url URL] [--connect-timeout D]",
		usage:    migrateUsage,
		flags:    migrateFlagSet,
		order:    []string{"url URL", "connect-timeout D", "verbose"},
		run:      runMigrate,
	})
}

const migrateUsage = `Usage: dlock migrate [flags]

Create the tables the backend keeps its locks in, if they do not exist, and
check those that do. The SQL backends (sqlite, postgres, mysql) also do this
on first use; run it ahead of time to create them as a user with the rights
to, or to check a deployment. The table is the URL's ?table= (default
dlock_locks), with its waiters table TABLE_waiters, its fence table
TABLE_fence and the holders table of semaphores, read-write locks and
elections TABLE_holders beside it, and on PostgreSQL its listeners table
TABLE_listeners (one row per connection that LISTENs for releases), its
watchers table TABLE_watchers (one row per watch) and the triggers that
notify them; a ?migrate=false
in the URL (which makes applications only check the tables) is ignored
here. It is safe to run from several places at once. Backends that keep no
schema (redis, redlock, zookeeper, etcd, mem) have nothing to create: it
says so and exits 0. The whole run is bounded by 2 minutes (or twice the
connect timeout if that is longer; not at all with a connect timeout of 0).

` + backendUsage + `  0  the tables exist and are dlock's (or the backend keeps none)
  2  configuration error: a bad flag or URL, or no home directory for the
     default database
  5  backend error: the backend cannot be opened or does not answer
  6  foreign data: a table of that name exists and is not dlock's
`

type migrateFlags struct {
	backendFlags
}

func migrateFlagSet(fs *flag.FlagSet) any {
	f := &migrateFlags{}
	f.define(fs, "log the library's details on stderr")
	return f
}

func runMigrate(ctx context.Context, e *env, opts any, args []string) int {
	f := opts.(*migrateFlags)
	raw, err := backendURL(f.url, e.getenv)
	if err != nil {
		e.errorf("%v", err)
		return urlErrorCode(err)
	}
	var cancel context.CancelFunc
	if d, ok := connectTimeout(raw, f.connect); ok && d == 0 {
		ctx, cancel = context.WithCancel(ctx) // no limit, as asked
	} else {
		ctx, cancel = context.WithTimeout(ctx, max(migrateTimeout, 2*d))
	}
	defer cancel()
	client, _, code := openClient(ctx, e, withoutMigrateParam(raw), f.connect, f.verbose)
	if client == nil {
		return code
	}
	defer client.Close()
	m, ok := client.Backend().(dlock.Migrator)
	if !ok {
		e.errorf("migrate: the %s backend keeps no tables; nothing to do", client)
		return exitOK
	}
	if err := m.Migrate(ctx); err != nil {
		e.errorf("migrate: %v", err)
		return errorCode(err)
	}
	table := ""
	if t, ok := client.Backend().(interface{ Table() string }); ok {
		table = " " + t.Table()
	}
	fmt.Fprintf(e.stdout, "the lock table%s on %s is ready\n", table, client)
	return exitOK
}

// withoutMigrateParam drops a migrate=… parameter from the URL, so that
// the URL of an application that opens with ?migrate=false (check, do not
// create) can be given to dlock migrate as it is.
func withoutMigrateParam(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || !u.Query().Has("migrate") {
		return raw // Open reports a malformed URL
	}
	q := u.Query()
	q.Del("migrate")
	u.RawQuery = q.Encode()
	return u.String()
}

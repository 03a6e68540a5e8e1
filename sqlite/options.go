package sqlite

import (
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/opt"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// Defaults of the options.
const (
	// DefaultTable is the lease table's name when no Table option is given.
	DefaultTable = sqllock.DefaultTable
	// DefaultBusyTimeout is how long a statement waits for another
	// process's write before it fails with SQLITE_BUSY (and is tried
	// again until its context is done).
	DefaultBusyTimeout = 5 * time.Second
	// DefaultWaiterTimeout is how long a fair waiter's queue entry lives
	// without a heartbeat.
	DefaultWaiterTimeout = sqllock.DefaultWaiterTimeout
)

// An Option configures Open, New or Migrate. Options that apply to Open
// only say so; given to New or Migrate they are [dlock.ErrInvalidOption].
type Option interface{ opt.Option[config] }

// option makes an Option of a function that sets its value.
type option = opt.Func[config]

// shared forwards an option the SQL backends share.
func shared(set func(*sqllock.Options)) Option {
	return option(func(c *config) { set(&c.Options) })
}

type config struct {
	sqllock.Options
	busyTimeout  time.Duration
	synchronous  string
	privateLocal bool // tests: no in-process sharing between Backends
	openOnly     []string
}

// Table sets the lease table's name (default [DefaultTable]); the fair
// queue is the table of that name + "_waiters". Several applications can
// keep their locks apart in one file with different tables. The name must
// be 1-48 ASCII letters, digits or underscores, not starting with a digit.
func Table(name string) Option { return shared(sqllock.SetTable(name)) }

// BusyTimeout sets SQLite's busy_timeout on every connection: how long a
// statement waits for another process's write lock before failing with
// SQLITE_BUSY (the backend then tries again until the operation's
// context is done). Default [DefaultBusyTimeout]; it must be at least 1ms.
// Open only.
func BusyTimeout(d time.Duration) Option {
	return option(func(c *config) {
		c.openOnly = append(c.openOnly, "BusyTimeout")
		if c.Check(d >= time.Millisecond, "busy timeout %v is below 1ms", d) {
			c.busyTimeout = d
		}
	})
}

// ConnectTimeout bounds how long Open waits to get the file into use (its
// switch to WAL mode waits out other processes that hold it) (default
// [dlock.DefaultConnectTimeout]; 0: no limit but the context's). Open
// only.
func ConnectTimeout(d time.Duration) Option {
	return option(func(c *config) {
		c.openOnly = append(c.openOnly, "ConnectTimeout")
		sqllock.SetConnectTimeout(d)(&c.Options)
	})
}

// WaiterTimeout sets how long a fair waiter's queue entry lives without a
// heartbeat (default [DefaultWaiterTimeout], minimum 300ms). A waiter
// refreshes its entry every third of it; a waiter whose process died
// holds up those behind it for at most this long.
func WaiterTimeout(d time.Duration) Option { return shared(sqllock.SetWaiterTimeout(d)) }

// Synchronous sets SQLite's synchronous mode: "FULL" (the default: every
// commit is on disk before it returns, so fencing tokens never go back,
// even after a power loss), "EXTRA", or "NORMAL" (faster; in WAL mode a
// power loss — not a crash — may undo the last commits, and with them
// grants and tokens that were handed out). Open only.
func Synchronous(mode string) Option {
	return option(func(c *config) {
		c.openOnly = append(c.openOnly, "Synchronous")
		m := strings.ToUpper(mode)
		if c.Check(m == "FULL" || m == "EXTRA" || m == "NORMAL", "synchronous mode %q is not FULL, EXTRA or NORMAL", mode) {
			c.synchronous = m
		}
	})
}

// privateLocal gives the Backend in-process state of its own, as if it
// were in a process of its own (tests use it to exercise the cross-process
// wake-up within one test binary).
func privateLocal() Option {
	return option(func(c *config) { c.privateLocal = true })
}

// resolve applies opts; open says whether they configure Open.
func resolve(open bool, opts []Option) (config, error) {
	cfg := config{Options: sqllock.DefaultOptions(), busyTimeout: DefaultBusyTimeout, synchronous: "FULL"}
	opt.Apply(&cfg, opts)
	cfg.Check(open || len(cfg.openOnly) == 0, "%s applies to Open only", strings.Join(cfg.openOnly, ", "))
	return cfg, cfg.Err("sqlite")
}

package mysql

import (
	"fmt"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/sqllock"
)

// Defaults of the options.
const (
	// DefaultTable is the lease table's name; the waiters table is named
	// after it (DefaultTable + "_waiters").
	DefaultTable = sqllock.DefaultTable
	// DefaultWaiterTimeout is how long a fair waiter's queue row lives
	// without a heartbeat.
	DefaultWaiterTimeout = sqllock.DefaultWaiterTimeout
)

// Option configures Open, New and Migrate.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	table         string
	waiterTimeout time.Duration
	errs          []string
}

// Table sets the lease table's name (default [DefaultTable]): 1 to 48
// ASCII letters, digits and underscores, not starting with a digit. The
// waiters table is the name + "_waiters". Whether case matters depends on
// the server's lower_case_table_names.
func Table(name string) Option {
	return optionFunc(func(c *config) {
		if err := sqllock.CheckTable(name); err != nil {
			c.errs = append(c.errs, err.Error())
			return
		}
		c.table = name
	})
}

// WaiterTimeout sets how long a fair waiter's queue row lives without a
// heartbeat (default [DefaultWaiterTimeout], at least 300ms): the waiter
// of a process that died holds up those behind it for at most this long.
func WaiterTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < sqllock.MinWaiterTimeout {
			c.errs = append(c.errs, fmt.Sprintf("waiter timeout %v is below the minimum %v", d, sqllock.MinWaiterTimeout))
			return
		}
		c.waiterTimeout = d
	})
}

func resolve(opts []Option) (config, error) {
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if len(cfg.errs) > 0 {
		return cfg, invalid("%s", strings.Join(cfg.errs, "; "))
	}
	return cfg, nil
}

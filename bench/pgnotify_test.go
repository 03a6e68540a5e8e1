package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/jackc/pgx/v5"
)

// BenchmarkPostgresNotify measures what one NOTIFY costs with n other
// connections LISTENing (on the same channel, or each on a channel of its
// own), the floor under a lease-mode hand-off between processes that
// wait: the release's trigger sends one NOTIFY, and PostgreSQL (up to 17
// at least) signals every backend of the database that LISTENs, on any
// channel, each of which wakes to read the queue. With 64 waiting
// processes (Contended64) that is 64 process wake-ups per hand-off.
//
//	cd bench && go test -run XXX -bench 'PostgresNotify' -benchtime 2000x
func BenchmarkPostgresNotify(b *testing.B) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		dsn = testserver.Postgres(b).TestDSN()
	}
	ctx := context.Background()
	for _, n := range []int{0, 8, 64} {
		for _, own := range []bool{false, true} {
			if n == 0 && own {
				continue
			}
			name := "listeners=" + strconv.Itoa(n)
			if own {
				name += "/own-channels"
			}
			b.Run(name, func(b *testing.B) {
				for i := range n {
					c, err := pgx.Connect(ctx, dsn)
					if err != nil {
						b.Fatal(err)
					}
					ch := "dlockbench_notify"
					if own {
						ch += strconv.Itoa(i)
					}
					if _, err := c.Exec(ctx, "LISTEN "+ch); err != nil {
						b.Fatal(err)
					}
					lctx, cancel := context.WithCancel(ctx)
					done := make(chan struct{})
					go func() {
						defer close(done)
						for {
							if _, err := c.WaitForNotification(lctx); err != nil {
								return
							}
						}
					}()
					b.Cleanup(func() { cancel(); <-done; c.Close(ctx) })
				}
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(ctx)
				b.ResetTimer()
				for range b.N {
					if _, err := c.Exec(ctx, "SELECT pg_notify('dlockbench_notify', 'x')"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqlite"
)

// Lock a job by name across the processes of one host through an SQLite
// file.
func Example() {
	dir, err := os.MkdirTemp("", "dlock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(dir, "locks.db"), sqlite.Table("locks"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b) // the Client closes b
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Mutex("billing/nightly-close", dlock.TTL(15*time.Second)).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// A new file's tokens start at the time it was created, in µs.
	fmt.Println("holding with token", lease.Token() > 1_700_000_000_000_000)
	// Output: holding with token true
}

package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/postgres" // registers postgres:// and postgresql://
)

// Lock a job by name across processes through PostgreSQL; the token goes
// with every write to the protected resource (see package fence).
func Example() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "postgres://app@db.example:5432/app?sslmode=disable&table=locks")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Mutex("billing/nightly-close", dlock.TTL(15*time.Second)).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	fmt.Println("holding with token", lease.Token())
}

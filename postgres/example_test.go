package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/postgres" // also registers postgres:// and postgresql://
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

// Open a Backend on a DSN, and a Client on it.
func ExampleOpen() {
	ctx := context.Background()
	b, err := postgres.Open(ctx, "postgres://app@db.example:5432/app?sslmode=disable", postgres.Table("locks"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b) // the Client closes b
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

package mysql_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mysql"
)

// Lock a job by name across processes through MySQL or MariaDB.
func Example() {
	ctx := context.Background()
	b, err := mysql.Open(ctx, "app:secret@tcp(db.example:3306)/app", mysql.Table("locks"))
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
	defer lease.Unlock(context.Background())
	fmt.Println("holding with token", lease.Token())
}

package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// A backend on a go-redis client the application already has. The client
// stays the application's: closing the dlock Client does not close it.
func ExampleNew() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	b, err := dredis.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b, dlock.TTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	lease, err := c.Mutex("billing/nightly-close").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	// Work under lease.Context() and give the token to the resource.
	fmt.Println("holding with fencing token", lease.Token())
}

// Open dials a client of its own: here through three Sentinels, for the
// master "mymaster", with fair waiters that drop out of the queue 2s after
// their process died.
func ExampleOpen() {
	ctx := context.Background()
	b, err := dredis.Open(ctx, "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379",
		dredis.Sentinel("mymaster"), dredis.WaiterTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b, dlock.Fair()) // c owns b: c.Close closes it and its client
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Opening by URL: the package registers redis://, rediss://,
// redis+sentinel:// and redis+cluster:// (and the rediss+ forms) with
// dlock.Open (see [dredis.ParseURL]). The same backend as in the example
// of Open, with database 0.
func Example_byURL() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0?waiter_timeout=2s",
		dlock.Fair())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Mutex("reports").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
}

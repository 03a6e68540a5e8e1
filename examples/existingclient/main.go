// Command existingclient builds dlock on the go-redis client a program
// already has — its pool, TLS and credentials — instead of a URL:
// redis.New takes any goredis.UniversalClient (single, Sentinel, Cluster)
// and leaves it open on Close.
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./existingclient
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlock-dev/dlock"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr}) // the program's own client
	defer rdb.Close()

	b, err := dredis.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // closes the backend, not rdb

	l, err := c.Mutex("orders/compaction").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", l.Name(), "on", c, "with a token:", l.Token() > 0)
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("the program's client still works:", rdb.Ping(ctx).Err() == nil)
}

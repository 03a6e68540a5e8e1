package etcd_test

import (
	"context"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/etcd" // the etcd:// URL scheme
)

// Open a Client on an etcd cluster by URL and hold a lock, passing its
// fencing token (the key's create revision) to the protected resource.
func Example() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp/locks")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Mutex("billing/nightly-close", dlock.TTL(15*time.Second)).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	log.Printf("holding with token %d until at least %v", lease.Token(), lease.Deadline())
}

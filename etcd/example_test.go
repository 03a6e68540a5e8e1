package etcd_test

import (
	"context"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// Open the backend in code: the endpoints, the key prefix and the
// client's settings. The backend owns its client.
func ExampleOpen() {
	ctx := context.Background()
	b, err := etcd.Open(ctx, "10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379",
		etcd.Prefix("myapp/locks"),
		etcd.Auth("myapp", "secret"),
		etcd.ConnectTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Use a client the application already has; closing the Client leaves it
// open.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	b, err := etcd.New(cli, etcd.Prefix("myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

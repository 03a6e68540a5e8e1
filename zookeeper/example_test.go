package zookeeper_test

import (
	"context"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

// Open a Client by URL: the servers of the ensemble, the root of the locks,
// and the session timeout, which bounds the TTL of every lease.
func Example() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/myapp/locks?session_timeout=15s",
		dlock.TTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	lease, err := c.Mutex("billing/nightly-close").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	// Work under lease.Context(); give lease.Token() (the lock node's
	// czxid) to the resource so that it can reject a stale holder.
	_ = lease.Token()
}

// Open the backend in code, with Curator's "SUSPENDED is lost" policy.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := zookeeper.Open(ctx, "zk1:2181,zk2:2181,zk3:2181",
		zookeeper.Root("/locks"),
		zookeeper.SessionTimeout(10*time.Second),
		zookeeper.Loss(zookeeper.LossOnDisconnect))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b, dlock.TTL(b.SessionTimeout()))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Use a connection the application already has (here with digest
// authentication); closing the Client leaves it open. Give the session
// timeout the servers granted: the backend cannot see it.
func ExampleNew() {
	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if err := conn.AddAuth("digest", []byte("myapp:secret")); err != nil {
		log.Fatal(err)
	}
	b, err := zookeeper.New(conn, zookeeper.Root("/locks"), zookeeper.SessionTimeout(10*time.Second),
		zookeeper.ACL(zk.DigestACL(zk.PermAll, "myapp", "secret")))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(b, dlock.TTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

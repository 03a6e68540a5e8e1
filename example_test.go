package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/mem"
)

func Example() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "mem://example")
	if err != nil {
		panic(err)
	}
	defer c.Close()

	lease, err := c.Mutex("billing/nightly-close", dlock.TTL(15*time.Second)).Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(context.Background())

	// Work under lease.Context(): it is cancelled if the lease is lost.
	// Give the token to the resource so it can reject stale holders.
	fmt.Println("holding", lease.Name(), "with token", lease.Token(), "valid:", lease.Err() == nil)
	// Output: holding billing/nightly-close with token 1 valid: true
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	defer c.Close()

	first, _ := c.Mutex("report").TryLock(ctx)
	_, err := c.Mutex("report").TryLock(ctx)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	var held *dlock.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by the first lease:", held.Holder.Owner == first.Owner())
	}
	first.Unlock(ctx)
	second, err := c.Mutex("report").TryLock(ctx)
	fmt.Println(err, second.Token())
	// Output:
	// true
	// held by the first lease: true
	// <nil> 2
}

func ExampleWithLease() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	defer c.Close()
	m := c.Mutex("inventory")

	outer, _ := m.Lock(ctx)
	// A function called under the lock can take it again when it is given
	// the outer lease in its context.
	inner, err := m.Lock(dlock.WithLease(ctx, outer))
	fmt.Println(err, inner.Token() == outer.Token(), inner.Holds())
	inner.Unlock(ctx)
	outer.Unlock(ctx)
	// Output: <nil> true 2
}

func ExampleOwner() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	defer c.Close()

	// Two acquisitions by the same explicit owner nest; the lock frees
	// after both are unlocked.
	a, _ := c.Mutex("job", dlock.Owner("job-42")).Lock(ctx)
	b, _ := c.Mutex("job", dlock.Owner("job-42")).Lock(ctx)
	fmt.Println(a.Token() == b.Token(), a.Holds(), b.Holds())
	b.Unlock(ctx)
	_, err := c.Mutex("job").TryLock(ctx)
	fmt.Println("after one unlock:", errors.Is(err, dlock.ErrNotAcquired))
	a.Unlock(ctx)
	_, err = c.Mutex("job").TryLock(ctx)
	fmt.Println("after both:", err)
	// Output:
	// true 1 2
	// after one unlock: true
	// after both: <nil>
}

func ExampleLease_Context() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	lease, _ := c.Mutex("work").Lock(ctx)

	work := lease.Context()
	c.Close() // the lease ends with its client
	<-work.Done()
	fmt.Println(errors.Is(work.Err(), dlock.ErrLeaseLost), errors.Is(work.Err(), dlock.ErrClosed), errors.Is(work.Err(), context.Canceled))
	// Output: true true true
}

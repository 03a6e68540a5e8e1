package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dlock-dev/dlock"
)

// A worker pool bounded across processes: at most 2 renders at once,
// whoever runs them.
func ExampleSemaphore() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	defer c.Close()

	sem := c.Semaphore("reports/render", 2)
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	_, err := sem.TryAcquire(ctx)
	var held *dlock.HeldError
	if errors.As(err, &held) {
		fmt.Printf("third permit refused: %d of %d held\n", held.Held, held.Limit)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // waits for a permit, woken when one is released
		defer wg.Done()
		p, err := sem.Acquire(ctx)
		fmt.Println("waiter granted:", err == nil, "token above both:", p.Token() > b.Token())
		p.Unlock(ctx)
	}()
	a.Unlock(ctx)
	wg.Wait()
	b.Unlock(ctx)
	// Output:
	// third permit refused: 2 of 2 held
	// waiter granted: true token above both: true
}

// Readers share, a writer excludes them, and a waiting writer holds back
// readers that come after it.
func ExampleRWMutex() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://")
	defer c.Close()

	rw := c.RWMutex("catalog")
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	_, err := rw.TryLock(ctx)
	fmt.Println("writer beside readers:", errors.Is(err, dlock.ErrNotAcquired))
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, _ := rw.Lock(ctx)
	fmt.Println("writer token above readers':", w.Token() > r2.Token())
	w.Downgrade(ctx) // now a reader: other readers may join, no writer comes in between
	r3, err := rw.TryRLock(ctx)
	fmt.Println("reader beside the downgraded writer:", err == nil, w.Weight())
	r3.Unlock(ctx)
	w.Unlock(ctx)
	// Output:
	// writer beside readers: true
	// writer token above readers': true
	// reader beside the downgraded writer: true 1
}

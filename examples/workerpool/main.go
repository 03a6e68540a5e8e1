// Command workerpool renders reports with at most 3 renders at once across
// every process that runs it, under a Semaphore of 3: start it several
// times and the fourth render waits for a permit, woken when one is
// released.
//
//	DLOCK_URL=redis://127.0.0.1:6379 go run ./workerpool
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/redis"
	_ "github.com/dlock-dev/dlock/sqlite"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := os.Getenv("DLOCK_URL")
	if url == "" {
		url = "sqlite://" + os.TempDir() + "/dlock-workerpool.db"
	}
	c, err := dlock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	sem := c.Semaphore("reports/render", 3)
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := sem.Acquire(ctx)
			if err != nil {
				log.Fatal(err)
			}
			defer p.Unlock(context.Background())
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(50 * time.Millisecond) // render report i
			running.Add(-1)
			_ = i
		}()
	}
	wg.Wait()
	fmt.Println("rendered 8 reports, at most", most.Load(), "at once")
}

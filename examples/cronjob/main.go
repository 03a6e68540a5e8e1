// Command cronjob is a scheduled job that must run once per schedule
// although the same crontab line runs on several hosts: each run takes the
// lock without waiting; the one that gets it runs the job, the others skip.
// MinHold keeps the name taken for a while after the job, so that a host
// whose clock or timer is a little late does not run it a second time.
//
//	DLOCK_URL=redis://127.0.0.1:6379 go run ./cronjob
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/postgres"
	_ "github.com/dlock-dev/dlock/redis"
	_ "github.com/dlock-dev/dlock/sqlite"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := os.Getenv("DLOCK_URL")
	if url == "" {
		url = "sqlite://" + os.TempDir() + "/dlock-cronjob.db"
	}
	c, err := dlock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Mutex("cron/nightly-report", dlock.TTL(10*time.Second), dlock.MinHold(5*time.Second)).TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("skipped: another host runs it")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	fmt.Println("running the job with token", l.Token())
	if err := job(l.Context()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("done")
}

// job is the work; it stops if the lease is lost.
func job(ctx context.Context) error {
	select {
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Command metrics serves lock metrics to Prometheus: dlockprom's Collector
// is the Client's tracer and is registered with the registry that
// promhttp serves. It takes a few locks, scrapes its own /metrics once and
// prints the dlock lines.
//
//	DLOCK_URL=redis://127.0.0.1:6379 go run ./metrics
package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	dlockprom "github.com/dlock-dev/dlock/prometheus"
	_ "github.com/dlock-dev/dlock/redis"
	_ "github.com/dlock-dev/dlock/sqlite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := os.Getenv("DLOCK_URL")
	if url == "" {
		url = "sqlite://" + os.TempDir() + "/dlock-metrics.db"
	}
	col := dlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	go srv.Serve(ln)
	defer srv.Close()

	c, err := dlock.Open(ctx, url, dlock.WithTracer(col))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m := c.Mutex("metrics/demo")
	first, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.TryLock(ctx); err == nil {
		log.Fatal("TryLock of a held lock succeeded")
	}
	done := make(chan *dlock.Lease)
	go func() {
		l, err := m.Lock(ctx) // waits for the first
		if err != nil {
			log.Fatal(err)
		}
		done <- l
	}()
	time.Sleep(100 * time.Millisecond)
	first.Unlock(ctx)
	(<-done).Unlock(ctx)

	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "dlock_lock_acquisitions_total") || strings.HasPrefix(line, "dlock_lock_held") || strings.HasPrefix(line, "dlock_lock_wait_seconds_count") {
			fmt.Println(line)
		}
	}
}

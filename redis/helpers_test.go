package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// newDlock returns a dlock Client on b, closed when the test ends.
func newDlock(t testing.TB, b dlock.Backend, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b, opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// monitor reads the server's MONITOR feed and tells which commands clients
// sent, leaving out the commands scripts ran.
type monitor struct {
	t     testing.TB
	conn  net.Conn
	r     *bufio.Reader
	admin *goredis.Client
	seq   int
}

func startMonitor(t testing.TB, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	m := &monitor{t: t, conn: conn, r: bufio.NewReader(conn), admin: newClient(t, addr)}
	fmt.Fprintf(conn, "*1\r\n$7\r\nMONITOR\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := m.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	m.commands() // the admin client's connection set-up
	return m
}

// commands returns the names of the commands clients sent since the last
// call, in order.
func (m *monitor) commands() []string {
	m.t.Helper()
	m.seq++
	marker := fmt.Sprintf("dlock-monitor-marker-%d", m.seq)
	if err := m.admin.Echo(context.Background(), marker).Err(); err != nil {
		m.t.Fatalf("ECHO: %v", err)
	}
	var out []string
	m.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		line, err := m.r.ReadString('\n')
		if err != nil {
			m.t.Fatalf("reading MONITOR: %v", err)
		}
		if strings.Contains(line, marker) {
			return out
		}
		_, rest, ok := strings.Cut(line, "] ")
		if !ok || strings.Contains(line, " lua]") {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		out = append(out, strings.ToLower(strings.Trim(strings.TrimSpace(name), `"`)))
	}
}

// fakeServer speaks just enough RESP to look like an old Redis: INFO says
// version, and scripts are unknown commands. With noInfo, INFO is refused
// too.
func fakeServer(t testing.TB, version string, noInfo bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveFake(c, version, noInfo)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func serveFake(c net.Conn, version string, noInfo bool) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		var n int
		if _, err := fmt.Sscanf(line, "*%d", &n); err != nil {
			return
		}
		var args []string
		for range n {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			var size int
			fmt.Sscanf(l, "$%d", &size)
			buf := make([]byte, size+2)
			if _, err := ioReadFull(r, buf); err != nil {
				return
			}
			args = append(args, string(buf[:size]))
		}
		if len(args) == 0 {
			return
		}
		var reply string
		switch cmd := strings.ToLower(args[0]); {
		case cmd == "ping":
			reply = "+PONG\r\n"
		case cmd == "info" && !noInfo:
			body := "# Server\r\nredis_version:" + version + "\r\n"
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(body), body)
		case cmd == "client":
			reply = "-ERR unknown subcommand\r\n"
		default:
			reply = fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// freeAddr returns a loopback address where nothing listens.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// warmUp runs every script once, so that the server has them cached (the
// first run of a script is EVALSHA, refused, then EVAL).
func warmUp(t testing.TB, c *dlock.Client) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	l, err := c.Mutex("warm-up", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

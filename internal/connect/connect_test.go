package connect

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

func TestParseTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"10": 10 * time.Second, "500ms": 500 * time.Millisecond, "0": 0, "1m30s": 90 * time.Second} {
		if d, err := ParseTimeout(v); err != nil || d != want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", v, d, err, want)
		}
	}
	for _, v := range []string{"", "soon", "-1s", "-3", "99999999999999"} {
		if d, err := ParseTimeout(v); err == nil {
			t.Errorf("ParseTimeout(%q) = %v, want an error", v, d)
		}
	}
}

// TestExplainWrongServer: a server that answers what the driver cannot
// read is named as not that kind of server, with what it said.
func TestExplainWrongServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("-ERR unknown command\r\n"))
		c.Close()
	}()
	var p Probe
	ctx, cancel := Bound(context.Background(), time.Minute)
	defer cancel()
	c, err := p.Dial(nil)(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	for err == nil {
		_, err = c.Read(buf)
	}
	if _, ok := c.(syscall.Conn); !ok {
		t.Error("a watched TCP connection hides its file descriptor, which drivers check")
	}
	c.Close()
	e := Server{Backend: "zookeeper", Kind: "ZooKeeper"}.Explain(ctx, l.Addr().String(), &p, errors.New("bad frame"))
	if !errors.Is(e, dlock.ErrBackendUnavailable) || !strings.Contains(e.Error(), `not a ZooKeeper server: it answered "-ERR unknown command\r\n"`) {
		t.Errorf("got %v", e)
	}
	// After Abort, dials fail at once.
	p.Abort()
	if _, err := p.Dial(nil)(ctx, "tcp", l.Addr().String()); err == nil {
		t.Error("dial after Abort succeeded")
	}
}

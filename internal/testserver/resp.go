package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// RedisError is an error reply from a Redis server ("-ERR ...", "-MOVED ...").
type RedisError string

// Error returns the reply text, such as "MOVED 3999 127.0.0.1:6381".
func (e RedisError) Error() string { return string(e) }

// dialCtx dials addr and sets the connection deadline from ctx.
func dialCtx(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}

// respDo sends one command on a new connection and reads the reply. Replies
// are string (simple and bulk strings), int64, nil, []any, or a RedisError.
func respDo(ctx context.Context, addr string, args ...string) (any, error) {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(respCommand(args)); err != nil {
		return nil, err
	}
	return respRead(bufio.NewReader(c))
}

func respCommand(args []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

func respRead(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return nil, errors.New("resp: empty line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, RedisError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 { // a negative length is RESP's null
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 { // a negative length is RESP's null
			return nil, err
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			v, err := respRead(r)
			if err != nil {
				var re RedisError
				if !errors.As(err, &re) {
					return nil, err
				}
				v = re
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unexpected reply %q", line)
}

func redisPing(ctx context.Context, addr string) error {
	v, err := respDo(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING: got %v", v)
	}
	return nil
}

// infoField returns the value of "field:" in an INFO-style reply.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}

// RedisCPU returns the CPU time a Redis server has used, in µs, from the
// text of its INFO cpu reply: used_cpu_user plus used_cpu_sys.
func RedisCPU(info string) float64 {
	var t float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		x, _ := strconv.ParseFloat(infoField(info, f), 64)
		t += x
	}
	return t * 1e6
}

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Package redisconn is the go-redis glue that the packages redis and
// redlock share: go-redis's logger sent to slog, and what an opening
// client needs to say why it cannot reach a server.
//
// go-redis has one process-wide logger (redis.SetLogger) that prints to
// stderr. This package's init replaces it, once, with a silent one: the
// library never writes on its own. A program that wants go-redis's lines
// calls redis.SetLogger itself (in main, after the inits).
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock/internal/connect"
	goredis "github.com/redis/go-redis/v9"
)

func init() { goredis.SetLogger(logger{}) }

// logger is a silent go-redis logger.
type logger struct{}

func (logger) Printf(context.Context, string, ...any) {}

// Server describes Redis for connect.Server.Explain; set its Backend.
var Server = connect.Server{
	Kind: "Redis",
	Auth: connect.ErrorOf(func(rerr goredis.Error) bool {
		msg := rerr.Error()
		for _, p := range []string{"NOAUTH", "WRONGPASS", "NOPERM"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return strings.Contains(msg, "invalid password") || strings.Contains(msg, "AUTH <password> called without any password")
	}),
	Answer: connect.ErrorOf[goredis.Error](nil),
}

// Probe returns a hook that lets p watch the connections of a client
// (add it with AddHook).
func Probe(p *connect.Probe) goredis.Hook { return probeHook{p} }

type probeHook struct{ p *connect.Probe }

func (h probeHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return goredis.DialHook(h.p.Dial(connect.DialFunc(next)))
}

func (probeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (probeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// SplitAddrs splits a comma list of Redis addresses and completes each
// to HOST:PORT: the port defaults to defPort and the host to localhost.
func SplitAddrs(list, defPort string) ([]string, error) {
	if list == "" {
		return nil, errors.New("no address")
	}
	var addrs []string
	for _, h := range strings.Split(list, ",") {
		if h == "" {
			return nil, fmt.Errorf("address list %q has an empty address", list)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort
		}
		if host == "" {
			host = "localhost"
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, fmt.Errorf("address %q has a bad port", h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

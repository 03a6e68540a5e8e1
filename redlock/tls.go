package redlock

import (
	"crypto/tls"
	"net"
)

func tlsConfig(addr string) *tls.Config {
	host, _, _ := net.SplitHostPort(addr)
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}

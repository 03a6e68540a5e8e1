//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package postgres

import "net"

// closedByServer cannot tell on this system; pgx's own ping after a
// second of idleness still applies.
func closedByServer(net.Conn) bool { return false }

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package postgres

import (
	"errors"
	"net"
	"syscall"
)

// closedByServer reports whether the server has closed c's connection or
// sent something unasked (the notice of pg_terminate_backend or of a
// shutdown), which an idle connection never gets otherwise: a peek at the
// socket without blocking, with no round trip. A connection the Backend
// would take from the pool in that state fails its next statement without
// telling whether the statement ran; dropped beforehand, it costs nothing.
func closedByServer(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	// Control, not Read: pgx may have a background read pending on the
	// socket, which holds the read lock until data comes. A peek does not
	// consume anything, so it does not disturb that read; if that read
	// already took the data, the statement that follows fails instead
	// and is retried (see the dialect's error classes).
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0, n == 0 && err == nil:
			closed = true // data unasked, or EOF
		case err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			closed = true
		}
	})
	return closed || err != nil
}

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// stopWait bounds how long stopGroup waits for a stop that does not come
// because SIGTSTP is ignored or dlock's process group is orphaned (then
// the kernel discards it).
const stopWait = time.Second

// stopGroup stops dlock's process group with SIGTSTP and returns when
// dlock has been continued, or after stopWait if it was not stopped.
func stopGroup() {
	// The stop may begin a moment after kill returns, on another thread:
	// wait for the SIGCONT that ends it rather than go on at once.
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	syscall.Kill(0, syscall.SIGTSTP)
	select {
	case <-cont:
	case <-time.After(stopWait):
	}
}

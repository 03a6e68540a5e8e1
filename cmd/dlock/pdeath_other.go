//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package main

import "syscall"

// setPdeathsig does nothing: there is no parent-death signal here; the
// guard alone kills the command's group when dlock dies.
func setPdeathsig(*syscall.SysProcAttr) {}

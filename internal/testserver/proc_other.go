//go:build !linux

package testserver

import "syscall"

func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

func ownsListener(*Process) error { return nil }

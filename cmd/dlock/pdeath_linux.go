package main

import "syscall"

// setPdeathsig makes the command die by SIGKILL when dlock's thread that
// starts it dies. Go's fork sets it before exec and then kills the child if
// its parent is already gone, so no window is left between fork and exec.
func setPdeathsig(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

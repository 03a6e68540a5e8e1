//go:build !linux

package main

// verifyWorker: dlock verify needs Linux (CLOCK_MONOTONIC shared by every
// process, PR_SET_PDEATHSIG for its workers).
func verifyWorker() (int, bool) { return 0, false }

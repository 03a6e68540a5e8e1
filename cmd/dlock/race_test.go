//go:build race && (linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

func init() { raceEnabled = true }

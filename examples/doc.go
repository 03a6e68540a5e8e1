// Package examples holds small runnable programs that use dlock, one per
// directory; examples_test.go builds and runs each against real servers,
// so they cannot rot. It is a module of its own, so that what the examples
// import (client_golang) never reaches the library's users.
//
//	cronjob         a scheduled job that runs on one host only, with MinHold
//	workerpool      at most N workers across processes, with a Semaphore
//	fencedwrite     a write to PostgreSQL that a lost lease cannot make
//	existingclient  dlock over a go-redis client the program already has
//	metrics         lock metrics served to Prometheus
package examples

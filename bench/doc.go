// Package bench compares dlock with other lock libraries on the same
// workloads (dlocktest.BenchLockers), in the same process, against the same
// servers. It is a module of its own so that the library's go.mod never
// lists the libraries it is compared with.
//
// Run it with, for example:
//
//	cd bench && go test -run XXX -bench . -benchtime 2000x
package bench

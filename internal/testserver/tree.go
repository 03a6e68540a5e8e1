package testserver

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killTree SIGKILLs a process and its descendants, and waits (briefly) until
// the descendants are gone, so that a restart does not meet leftovers such
// as PostgreSQL backends still attached to shared memory.
func killTree(proc *os.Process) {
	kids := descendants(proc.Pid)
	_ = proc.Signal(syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, k := range kids {
		for alive(k) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// signalTree signals a process and its descendants. A process that has
// already exited (but is not yet reaped by Wait) gives ErrNotRunning.
func signalTree(proc *os.Process, sig syscall.Signal) error {
	kids := descendants(proc.Pid)
	if err := proc.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
			return ErrNotRunning
		}
		return err
	}
	for _, k := range kids {
		_ = syscall.Kill(k, sig)
	}
	return nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	f := procStat(strconv.Itoa(pid))
	if len(f) == 0 {
		return false
	}
	return f[0][0] != 'Z' && f[0][0] != 'X'
}

// procStat returns the fields of /proc/pid/stat that follow the command name
// (state, ppid, ...), or nil when the process is gone.
func procStat(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// descendants returns the pids of all descendants of pid, read from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(e.Name())
		if len(f) < 2 {
			continue
		}
		pp, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[pp] = append(children[pp], n)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, k := range children[c] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

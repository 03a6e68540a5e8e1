package testserver

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr runs the server as cred (if not nil). Pdeathsig: if the test
// binary dies without running its cleanups (go test -timeout panics,
// SIGKILL), the kernel kills the server too instead of leaving it running.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// ownsListener checks, through /proc, that the process itself holds the
// listening socket on its client port. Without it a readiness probe could
// talk to someone else's server that took the port first (from another test
// binary), while ours is failing to bind.
func ownsListener(p *Process) error {
	pid := p.PID()
	if pid == 0 {
		return ErrNotRunning
	}
	inodes, err := listenInodes(pid, p.Port())
	if err != nil {
		return nil // no /proc/net: skip the check
	}
	if len(inodes) == 0 {
		return fmt.Errorf("nothing listens on port %d yet", p.Port())
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			return nil
		}
	}
	return fmt.Errorf("port %d is held by another process", p.Port())
}

// listenInodes returns the socket inodes listening on port (IPv4 and IPv6)
// in the network namespace of process pid (a server started WithIsolation
// has its own).
func listenInodes(pid, port int) (map[string]bool, error) {
	hexPort := fmt.Sprintf(":%04X", port)
	out := map[string]bool{}
	found := false
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if err != nil {
			continue
		}
		found = true
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], hexPort) {
				continue
			}
			out[fs[9]] = true
		}
	}
	if !found {
		return nil, errors.New("no /proc/net/tcp")
	}
	return out, nil
}

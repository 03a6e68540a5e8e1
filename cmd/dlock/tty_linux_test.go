package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Tests of dlock on a terminal: the command gets the terminal's foreground
// (it can read it, Ctrl-C reaches it), dlock gives the terminal back when
// the command exits, and Ctrl-Z and fg work in an interactive shell.

// terminal is the master side of a pseudo-terminal and what was read from
// it.
type terminal struct {
	t      *testing.T
	master *os.File
	out    syncBuffer
	eof    chan struct{}
	// exited is closed when the one cmd.Wait, started with the command,
	// has returned waitErr: waitExit and the clean-up both wait on it
	// (two Waits of one Cmd race).
	exited  chan struct{}
	waitErr error
}

// startOnTerminal starts name with args as the leader of a new session
// whose controlling terminal is a fresh pseudo-terminal.
func startOnTerminal(t *testing.T, env []string, name string, args ...string) (*terminal, *exec.Cmd) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var unlock int32
	if err := ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	var n uint32
	if err := ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, master: master, eof: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		term.waitErr = cmd.Wait()
		close(term.exited)
	}()
	go func() {
		defer close(term.eof)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			term.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-term.exited
		master.Close()
	})
	return term, cmd
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// expect waits until the terminal has shown s after what earlier expects
// consumed, and consumes through it.
func (term *terminal) expect(s string, consumed *int) {
	term.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := term.out.String()
		if i := strings.Index(out[*consumed:], s); i >= 0 {
			*consumed += i + len(s)
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("the terminal did not show %q within 20s; it shows:\n%s", s, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (term *terminal) send(s string) {
	term.t.Helper()
	if _, err := term.master.Write([]byte(s)); err != nil {
		term.t.Fatal(err)
	}
}

// waitExit waits for cmd and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, term *terminal) int {
	t.Helper()
	select {
	case <-term.exited:
		var ee *exec.ExitError
		if err := term.waitErr; err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit within 20s; the terminal shows:\n%s", cmd.Args[0], term.out.String())
	}
	return -1
}

// The command can read the terminal, and after it the terminal is back with
// the process that ran dlock (here a shell without job control, which would
// be stopped reading it otherwise).
func TestTerminalForeground(t *testing.T) {
	t.Parallel()
	term, cmd := startOnTerminal(t, testEnv(t), "sh", "-c",
		`"$0" run --name x -- sh -c 'echo "$((6*7))ready"; read line; echo "got:$line"'; echo "dlock:$?"; read x; echo "after:$x"`,
		dlockBin)
	var at int
	term.expect("42ready", &at)
	term.send("one\n")
	term.expect("got:one", &at)
	term.expect("dlock:0", &at)
	term.send("two\n")
	term.expect("after:two", &at)
	if code := waitExit(t, cmd, term); code != 0 {
		t.Fatalf("exit code %d; the terminal shows:\n%s", code, term.out.String())
	}
}

// Ctrl-C on the terminal interrupts the command; dlock exits 130.
func TestTerminalInterrupt(t *testing.T) {
	t.Parallel()
	term, cmd := startOnTerminal(t, testEnv(t), dlockBin, "run", "--name", "x", "--",
		"sh", "-c", `echo "$((6*7))ready"; sleep 30`)
	var at int
	term.expect("42ready", &at)
	term.send("\x03")
	if code := waitExit(t, cmd, term); code != 130 {
		t.Fatalf("exit code %d, want 130; the terminal shows:\n%s", code, term.out.String())
	}
}

// In an interactive shell, Ctrl-Z stops the job (dlock and the command),
// fg continues it with the terminal, and the command can read it again.
func TestTerminalSuspendAndResume(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	env := append(testEnv(t), "PS1=$ ", "TERM=dumb", "PATH="+os.Getenv("PATH"))
	term, cmd := startOnTerminal(t, env, "bash", "--norc", "--noprofile", "-i")
	var at int
	term.send(dlockBin + ` run --name x -- sh -c 'echo "$((6*7))ready"; read line; echo "got:$line"'` + "\n")
	term.expect("42ready", &at)
	time.Sleep(100 * time.Millisecond) // let the command block in read
	term.send("\x1a")
	term.expect("Stopped", &at)
	term.send("fg\n")
	term.expect("fg", &at)
	time.Sleep(100 * time.Millisecond)
	term.send("hello\n")
	term.expect("got:hello", &at)
	term.send(`echo "status:$?"` + "\n")
	term.expect("status:0", &at)
	term.send("exit\n")
	if code := waitExit(t, cmd, term); code != 0 {
		t.Fatalf("bash exit code %d; the terminal shows:\n%s", code, term.out.String())
	}
}

package dlocktest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// waitFor runs WaitFor on a fatalTB in a goroutine of its own and returns
// its failure message ("" if it returned).
func waitFor(within time.Duration, cond func() error) string {
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dlocktest.WaitFor(f, within, cond)
	}()
	<-done
	return f.msg
}

func TestWaitFor(t *testing.T) {
	calls := 0
	msg := waitFor(time.Minute, func() error {
		if calls++; calls < 5 {
			return errors.New("not yet")
		}
		return nil
	})
	if msg != "" || calls != 5 {
		t.Errorf("WaitFor on a condition that holds at the 5th call: %d calls, failure %q", calls, msg)
	}

	start := time.Now()
	msg = waitFor(50*time.Millisecond, func() error { return errors.New("3 keys left") })
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("WaitFor on a condition that never holds returned after %v, want 50ms", took)
	}
	if !strings.Contains(msg, "3 keys left") || !strings.Contains(msg, "50ms") {
		t.Errorf("failure %q does not say what was left and for how long", msg)
	}
}

package verify

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestReadyBringsServersBack: before each matrix run the store's servers
// are brought back, whatever the last fault left them in: killed,
// paused or running.
func TestReadyBringsServersBack(t *testing.T) {
	testserver.Require(t, testserver.KindRedis)
	l, err := StartLocal("redlock", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := l.servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	if err := l.ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	for _, p := range l.servers {
		if !p.Running() || p.Paused() {
			t.Errorf("%s: running %v, paused %v after ready", p.Name(), p.Running(), p.Paused())
		}
		if err := p.WaitReady(); err != nil {
			t.Errorf("%s: %v", p.Name(), err)
		}
	}
}

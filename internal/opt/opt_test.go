package opt

import (
	"errors"
	"testing"
)

var errKind = errors.New("kind")

type config struct{ n []int }

type option interface{ Option[config] }

func TestApplySkipsNil(t *testing.T) {
	var c config
	add := func(n int) option { return Func[config](func(c *config) { c.n = append(c.n, n) }) }
	Apply(&c, []option{add(1), nil, add(2)})
	if len(c.n) != 2 || c.n[0] != 1 || c.n[1] != 2 {
		t.Fatalf("applied %v, want [1 2]", c.n)
	}
}

func TestProblems(t *testing.T) {
	var p Problems
	if err := p.Err(errKind, "x"); err != nil {
		t.Fatalf("no problems: %v, want nil", err)
	}
	if !p.Check(true, "never %d", 1) {
		t.Fatal("Check(true) = false")
	}
	if p.Check(false, "a %d", 1) || p.Check(false, "b") {
		t.Fatal("Check(false) = true")
	}
	err := p.Err(errKind, "etcd")
	if !errors.Is(err, errKind) || err.Error() != "etcd: a 1; b" {
		t.Fatalf("Err = %v (matches kind: %v), want \"etcd: a 1; b\" matching it", err, errors.Is(err, errKind))
	}
}

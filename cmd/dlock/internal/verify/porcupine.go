package verify

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history as porcupine sees it: a lock whose acquire returns a token
// and whose release comes at the end of each grant's validity. It is
// linearizable exactly when some order of the operations, each placed
// inside its own time interval, gives a lock that is held by one worker at
// a time with tokens that increase: (a) and (b) checked a second way, and
// a history porcupine's visualizer can draw.

type lockState struct {
	holder int // -1: free
	token  uint64
}

type lockInput struct {
	release bool
	worker  int
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{holder: -1} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		if in.release {
			if s.holder != in.worker {
				return false, s
			}
			return true, lockState{holder: -1, token: s.token}
		}
		tok := output.(uint64)
		if s.holder != -1 || tok <= s.token {
			return false, s
		}
		return true, lockState{holder: in.worker, token: tok}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(lockInput)
		if in.release {
			return fmt.Sprintf("worker %d: validity ends", in.worker)
		}
		return fmt.Sprintf("worker %d: acquire -> token %d", in.worker, output.(uint64))
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.holder < 0 {
			return fmt.Sprintf("free (last token %d)", s.token)
		}
		return fmt.Sprintf("held by worker %d, token %d", s.holder, s.token)
	},
}

// porcupineOps turns the grants into porcupine operations: an acquire from
// Lock's call to its return, a release at the end of the validity.
func porcupineOps(gs []Grant) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, 2*len(gs))
	for _, g := range gs {
		ops = append(ops, porcupine.Operation{ClientId: g.Worker, Input: lockInput{worker: g.Worker},
			Call: g.Invoke, Output: g.Token, Return: g.Start})
		if g.End != math.MaxInt64 {
			ops = append(ops, porcupine.Operation{ClientId: g.Worker, Input: lockInput{release: true, worker: g.Worker},
				Call: g.End, Output: nil, Return: g.End})
		}
	}
	return ops
}

// Porcupine checks the grants with porcupine within timeout and, when
// htmlPath is not empty, writes its visualization there. The result is
// "Ok", "Illegal" or "Unknown" (timed out).
func Porcupine(gs []Grant, timeout time.Duration, htmlPath string) (string, error) {
	res, info := porcupine.CheckOperationsVerbose(lockModel, porcupineOps(gs), timeout)
	if htmlPath != "" {
		if err := porcupine.VisualizePath(lockModel, info, htmlPath); err != nil {
			return string(res), err
		}
	}
	return string(res), nil
}

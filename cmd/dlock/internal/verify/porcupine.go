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
// a history porcupine's visualizer can draw. A weighted kind (a semaphore,
// a read-write lock) is the same lock with a limit: the weights held fit
// in it at every step.

type lockState struct {
	holder int // -1: free; -2: held by several (a weighted kind)
	held   int // the weight held
	token  uint64
}

type lockInput struct {
	release bool
	worker  int
	weight  int
}

// lockModel is the model of a lock of limit (1: a mutex or an election).
func lockModel(limit int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{holder: -1} },
		Step: func(state, input, output any) (bool, any) {
			s, in := state.(lockState), input.(lockInput)
			if in.release {
				if s.held < in.weight || (s.holder >= 0 && s.holder != in.worker) {
					return false, s
				}
				s.held -= in.weight
				if s.held == 0 {
					s.holder = -1
				}
				return true, s
			}
			tok := output.(uint64)
			if s.held+in.weight > limit || tok <= s.token {
				return false, s
			}
			s.holder = in.worker
			if s.held > 0 {
				s.holder = -2
			}
			s.held += in.weight
			s.token = tok
			return true, s
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
			switch {
			case s.held == 0:
				return fmt.Sprintf("free (last token %d)", s.token)
			case s.holder >= 0:
				return fmt.Sprintf("held by worker %d, token %d", s.holder, s.token)
			}
			return fmt.Sprintf("%d of %d held, last token %d", s.held, limit, s.token)
		},
	}
}

// porcupineOps turns the grants into porcupine operations: an acquire from
// Lock's call to its return, a release at the end of the validity.
func porcupineOps(gs []Grant) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, 2*len(gs))
	for _, g := range gs {
		ops = append(ops, porcupine.Operation{ClientId: g.Worker, Input: lockInput{worker: g.Worker, weight: g.weight()},
			Call: g.Invoke, Output: g.Token, Return: g.Start})
		if g.End != math.MaxInt64 {
			ops = append(ops, porcupine.Operation{ClientId: g.Worker, Input: lockInput{release: true, worker: g.Worker, weight: g.weight()},
				Call: g.End, Output: nil, Return: g.End})
		}
	}
	return ops
}

// Porcupine checks the grants of a lock of limit (1 for a mutex or an
// election) with porcupine within timeout and, when htmlPath is not empty,
// writes its visualization there. The result is "Ok", "Illegal" or
// "Unknown" (timed out).
func Porcupine(gs []Grant, limit int, timeout time.Duration, htmlPath string) (string, error) {
	m := lockModel(max(limit, 1))
	res, info := porcupine.CheckOperationsVerbose(m, porcupineOps(gs), timeout)
	if htmlPath != "" {
		if err := porcupine.VisualizePath(m, info, htmlPath); err != nil {
			return string(res), err
		}
	}
	return string(res), nil
}

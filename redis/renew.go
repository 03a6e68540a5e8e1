package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// batchSize bounds the holds renewed by one script call.
const batchSize = 256

// RenewBatch renews many holds: on a single server (or Sentinel master) in
// one script call per 256 holds, on a Cluster in one script call per
// slot, sent as one pipeline (one round trip per node).
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	if hasWeighted(rs) {
		return b.renewMixed(ctx, rs)
	}
	errs := make([]error, len(rs))
	calls := b.renewCalls(rs)
	results := make([]any, len(calls))
	callErrs := make([]error, len(calls))
	acks := make([]int, len(calls))
	if b.cfg.replicas > 0 || len(calls) == 1 {
		for j, c := range calls {
			results[j], acks[j], callErrs[j] = b.run(ctx, renewBatchScript, c.keys, c.args...)
		}
	} else {
		b.pipelineScripts(ctx, renewBatchScript, len(calls), func(j int) ([]any, []any) { return calls[j].keys, calls[j].args }, results, callErrs)
	}
	for j, c := range calls {
		if callErrs[j] != nil {
			err := b.fail(b.keysOf(rs[c.idx[0]].Hold), callErrs[j])
			for _, i := range c.idx {
				errs[i] = err
			}
			continue
		}
		codes, _ := results[j].([]any)
		for n, i := range c.idx {
			code := int64(-2)
			if n < len(codes) {
				code = toInt(codes[n])
			}
			errs[i] = b.renewedErr(rs[i], code, acks[j], results[j])
		}
	}
	return errs
}

// renewCall is one call of the batch renew script: the renewals rs[idx].
type renewCall struct {
	idx  []int
	keys []any
	args []any
}

// renewCalls groups the renewals into script calls of at most batchSize:
// all together on one server, by slot on a Cluster.
func (b *Backend) renewCalls(rs []dlock.Renewal) []renewCall {
	var groups [][]int
	if b.cluster == nil {
		all := make([]int, len(rs))
		for i := range all {
			all[i] = i
		}
		groups = append(groups, all)
	} else {
		bySlot := make(map[uint16][]int)
		var order []uint16
		for i, r := range rs {
			s := b.keysOf(r.Hold).slot
			if _, ok := bySlot[s]; !ok {
				order = append(order, s)
			}
			bySlot[s] = append(bySlot[s], i)
		}
		for _, s := range order {
			groups = append(groups, bySlot[s])
		}
	}
	var calls []renewCall
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), batchSize)
			c := renewCall{idx: g[:n]}
			for _, i := range c.idx {
				r := rs[i]
				c.keys = append(c.keys, b.keysOf(r.Hold).lock())
				c.args = append(c.args, r.Hold.Owner, strconv.FormatUint(r.Hold.Token, 10), millis(r.TTL))
			}
			calls = append(calls, c)
			g = g[n:]
		}
	}
	return calls
}

// renewedErr is the outcome of renewal r whose hold the script answered
// with code; acks replicas acknowledged the call, whose reply was reply.
func (b *Backend) renewedErr(r dlock.Renewal, code int64, acks int, reply any) error {
	switch code {
	case 1:
		if b.cfg.replicas > 0 && acks < b.cfg.replicas {
			return fmt.Errorf("%w: the renewal reached %d of %d replicas within %v",
				dlock.ErrBackendUnavailable, acks, b.cfg.replicas, b.cfg.replicaTimeout)
		}
		return nil
	case 0:
		return fmt.Errorf("%w: token %d is no longer the holder's", dlock.ErrLeaseLost, r.Hold.Token)
	case -1:
		return fmt.Errorf("%w: key %q is not a hash", ErrForeignData, b.keysOf(r.Hold).lock())
	default:
		return fmt.Errorf("redis: unexpected reply %v from the batch renew script", reply)
	}
}

// pipelineScripts runs n calls of s in one pipeline (EVALSHA, then EVAL
// for those the server did not have).
func (b *Backend) pipelineScripts(ctx context.Context, s *script, n int, call func(int) ([]any, []any), results []any, errs []error) {
	cmds := make([]*goredis.Cmd, n)
	p := b.rdb.Pipeline()
	for j := range n {
		keys, args := call(j)
		cmds[j] = goredis.NewCmd(ctx, evalArgs(true, s, keys, args)...)
		p.Process(ctx, cmds[j])
	}
	p.Exec(ctx)
	var retry []int
	for j, c := range cmds {
		if isNoScript(c.Err()) {
			retry = append(retry, j)
			continue
		}
		results[j], errs[j] = c.Result()
	}
	if len(retry) == 0 {
		return
	}
	p = b.rdb.Pipeline()
	for _, j := range retry {
		keys, args := call(j)
		cmds[j] = goredis.NewCmd(ctx, evalArgs(false, s, keys, args)...)
		p.Process(ctx, cmds[j])
	}
	p.Exec(ctx)
	for _, j := range retry {
		results[j], errs[j] = cmds[j].Result()
	}
}

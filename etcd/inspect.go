package etcd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// inspectPage is how many keys Inspect reads per request.
const inspectPage = 1000

// Inspect lists the held locks whose names start with prefix: for each
// holder, its owner, token and hold count, the remaining TTL of its lease
// by etcd's clock (one TimeToLive request per holder) and the number of
// waiting keys. A mutex's holder is its oldest key; a weighted name's
// holders are its oldest keys whose weights fit in its limit, each with
// its kind, limit and weight. The keys are read page by page at one
// revision.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	start := b.prefix + "/" + escape(prefix)
	end := clientv3.GetPrefixRangeEnd(start)
	type lock struct {
		holder   *mvccpb.KeyValue
		keys     int
		weighted []*mvccpb.KeyValue // a weighted name's keys
	}
	locks := make(map[string]*lock)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(inspectPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := b.cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, wrap(ctx, "listing locks", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			name, ok := b.nameOf(string(kv.Key))
			if !ok || !strings.HasPrefix(name, prefix) {
				continue
			}
			l := locks[name]
			if l == nil {
				l = &lock{}
				locks[name] = l
			}
			l.keys++
			if l.holder == nil || kv.CreateRevision < l.holder.CreateRevision {
				l.holder = kv
			}
			if decode(kv).Kind != dlock.KindMutex {
				l.weighted = append(l.weighted, kv)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	out := make([]dlock.LockInfo, 0, len(locks))
	for name, l := range locks {
		v := decode(l.holder)
		if v.Kind != dlock.KindMutex {
			out = append(out, holders(name, l.weighted)...)
			continue
		}
		var bad string
		if why := foreign(l.holder); why != "" {
			bad = fmt.Sprintf("key %q: %s", l.holder.Key, why)
		}
		out = append(out, dlock.LockInfo{
			Name: name, Owner: v.Owner, Token: uint64(l.holder.CreateRevision),
			Count: max(v.Holds, 1), Kind: dlock.KindMutex, Limit: 1, Weight: 1, Waiters: l.keys - 1, Bad: bad,
		})
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	// The holders' leases, found by their tokens (create revisions).
	leaseOf := make(map[string]map[int64]clientv3.LeaseID, len(locks))
	for name, l := range locks {
		m := map[int64]clientv3.LeaseID{l.holder.CreateRevision: clientv3.LeaseID(l.holder.Lease)}
		for _, kv := range l.weighted {
			m[kv.CreateRevision] = clientv3.LeaseID(kv.Lease)
		}
		leaseOf[name] = m
	}
	ids := make([]clientv3.LeaseID, len(out))
	for i := range out {
		ids[i] = leaseOf[out[i].Name][int64(out[i].Token)]
	}
	// The remaining TTLs, a few requests at a time; unknown (0) on errors.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range out {
		id := ids[i]
		if id == clientv3.NoLease {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if r, err := b.cli.TimeToLive(ctx, id); err == nil && r.TTL > 0 {
				out[i].TTL = time.Duration(r.TTL) * time.Second
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// holders returns a weighted name's holders, one LockInfo each, from its
// keys: the oldest whose weights fit in the limit (see scan). A key that
// dlock did not write is listed with Bad set and counts for nothing.
func holders(name string, kvs []*mvccpb.KeyValue) []dlock.LockInfo {
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	var out []dlock.LockInfo
	limit, sum, waiters := 0, 0, 0
	for _, kv := range kvs {
		v := decode(kv)
		if why := foreign(kv); why != "" {
			out = append(out, dlock.LockInfo{Name: name, Owner: v.Owner, Token: uint64(kv.CreateRevision),
				Count: v.Holds, Kind: v.Kind, Limit: v.Limit, Weight: v.Weight, Value: v.Value, Bad: fmt.Sprintf("key %q: %s", kv.Key, why)})
			continue
		}
		if limit == 0 {
			limit = v.Limit // the name's, as its oldest key records it
		}
		if sum += v.Weight; sum > limit {
			waiters++
			continue
		}
		out = append(out, dlock.LockInfo{Name: name, Owner: v.Owner, Token: uint64(kv.CreateRevision),
			Count: v.Holds, Kind: v.Kind, Limit: v.Limit, Weight: v.Weight, Value: v.Value})
	}
	for i := range out {
		out[i].Waiters = waiters
	}
	return out
}

package etcd

import (
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

// Inspect lists the held locks whose names start with prefix: for each, the
// holder's owner, token and hold count, the remaining TTL of its lease by
// etcd's clock (one TimeToLive request per lock) and the number of waiting
// keys behind it. The keys are read page by page at one revision.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	start := b.prefix + "/" + escape(prefix)
	end := clientv3.GetPrefixRangeEnd(start)
	type lock struct {
		holder *mvccpb.KeyValue
		keys   int
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
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	out := make([]dlock.LockInfo, 0, len(locks))
	for name, l := range locks {
		v := decode(l.holder)
		var bad string
		if why := foreign(l.holder); why != "" {
			bad = fmt.Sprintf("key %q: %s", l.holder.Key, why)
		}
		out = append(out, dlock.LockInfo{
			Name: name, Owner: v.Owner, Token: uint64(l.holder.CreateRevision),
			Count: max(v.Holds, 1), Waiters: l.keys - 1, Bad: bad,
		})
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	// The remaining TTLs, a few requests at a time; unknown (0) on errors.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range out {
		id := clientv3.LeaseID(locks[out[i].Name].holder.Lease)
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

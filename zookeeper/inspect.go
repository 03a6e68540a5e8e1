package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// Inspect lists the held locks whose names start with prefix, with the
// holder's owner, token and reentry count and the number of waiters
// queued behind it. TTL is 0: ZooKeeper keeps no per-lock expiry, the
// holder's session does. It reads the root's children, then the queue and
// the holder's node of every matching lock (many requests at once).
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	kids, err := b.children(ctx, b.cfg.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, b.unavailable("list "+b.cfg.root, err)
	}
	var (
		mu    sync.Mutex
		out   []dlock.LockInfo
		errs  []error
		wg    sync.WaitGroup
		limit = make(chan struct{}, 64)
	)
	for _, k := range kids {
		name, ok := unescape(k)
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer func() { <-limit; wg.Done() }()
			infos, err := b.inspectOne(ctx, name, b.cfg.root+"/"+k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				out = append(out, infos...)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return out, nil
}

// inspectOne reads the holders of one lock: the head of its queue for a
// mutex, the granted prefix for the other kinds (see inspectWeighted).
func (b *Backend) inspectOne(ctx context.Context, name, parent string) ([]dlock.LockInfo, error) {
	for range 8 {
		kids, err := b.children(ctx, parent)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, b.unavailable("list "+parent, err)
		}
		q := queue(kids)
		if len(q) == 0 {
			return nil, nil
		}
		r, err := b.get(ctx, parent+"/"+q[0].name, false)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile: look again
		}
		if err != nil {
			return nil, b.unavailable("read "+parent, err)
		}
		d, bad := parseData(r.data, r.stat)
		if bad == "" && d.Kind != dlock.KindMutex {
			return b.inspectWeighted(ctx, name, parent, q)
		}
		if bad != "" {
			bad = "node " + parent + "/" + q[0].name + ": " + bad
		}
		return []dlock.LockInfo{{Name: name, Owner: d.Owner, Token: uint64(r.stat.Czxid), Count: d.Count,
			Kind: dlock.KindMutex, Limit: 1, Weight: 1, Waiters: len(q) - 1, Bad: bad}}, nil
	}
	return nil, nil
}

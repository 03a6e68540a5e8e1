package redis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// Inspect lists the locks held whose names start with prefix, with a SCAN
// over the backend's key pattern (on every master of a Cluster). Waiters
// is -1 (unknown): the lock's queue has the fair waiters only (Queued
// counts them), and non-fair ones are known only to their processes, so a
// count would leave them out.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	pattern := b.cfg.prefix + ":{" + encodeName(prefix) + "*}"
	var mu sync.Mutex
	var out []dlock.LockInfo
	scan := func(ctx context.Context, c *goredis.Client) error {
		infos, err := b.scanNode(ctx, c, pattern, prefix)
		mu.Lock()
		out = append(out, infos...)
		mu.Unlock()
		return err
	}
	var err error
	switch {
	case b.cluster != nil:
		err = b.cluster.ForEachMaster(ctx, scan)
	default:
		c, ok := b.rdb.(*goredis.Client)
		if !ok {
			return nil, fmt.Errorf("redis: Inspect needs a *redis.Client or *redis.ClusterClient, not %T", b.rdb)
		}
		err = scan(ctx, c)
	}
	if err != nil {
		return nil, classify(err)
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (b *Backend) scanNode(ctx context.Context, c *goredis.Client, pattern, prefix string) ([]dlock.LockInfo, error) {
	var keys []string
	var cursor uint64
	for {
		// Every type: a key of another type at a lock's key is listed
		// as foreign data.
		ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, err
		}
		keys = append(keys, ks...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	var out []dlock.LockInfo
	head := b.cfg.prefix + ":{"
	for len(keys) > 0 {
		n := min(len(keys), 500)
		chunk := keys[:n]
		keys = keys[n:]
		p := c.Pipeline()
		now := p.Time(ctx)
		hm := make([]*goredis.SliceCmd, n)
		ql := make([]*goredis.IntCmd, n)
		ttl := make([]*goredis.DurationCmd, n)
		for i, key := range chunk {
			hm[i] = p.HMGet(ctx, key, "o", "n", "f", "x", "w", "s", "k")
			ql[i] = p.LLen(ctx, key+":queue")
			ttl[i] = p.PTTL(ctx, key) // the lease end of a hold without x
		}
		// Single commands may fail (a key that changed type); the others
		// are still good.
		if _, err := p.Exec(ctx); err != nil && !isRedisReply(err) {
			return nil, err
		}
		if now.Err() != nil {
			return nil, now.Err()
		}
		nowMs := now.Val().UnixMilli()
		var wkeys, wnames []string
		for i, key := range chunk {
			enc := strings.TrimSuffix(strings.TrimPrefix(key, head), "}")
			name, err := decodeName(enc)
			if err != nil || !strings.HasPrefix(name, prefix) {
				continue
			}
			vals, err := hm[i].Result()
			if err == nil && len(vals) > 6 && vals[6] != nil {
				wkeys, wnames = append(wkeys, key), append(wnames, name)
				continue // a weighted name: inspectWeighted lists its holders
			}
			var bad string
			switch {
			case err != nil && strings.Contains(err.Error(), "WRONGTYPE"):
				bad = fmt.Sprintf("key %q holds another type than a hash", key)
			case err != nil || len(vals) < 6:
				continue
			default:
				bad = hashFault(vals, ttl[i].Val())
			}
			if bad == "" && toStr(vals[0]) == "" {
				continue // free
			}
			var left int64
			if bad == "" {
				if left = toInt(vals[3]) - nowMs; vals[3] == nil {
					left = ttl[i].Val().Milliseconds()
				}
				if left <= 0 {
					continue // expired
				}
			}
			in := dlock.LockInfo{Name: name, Bad: bad, Waiters: -1, Queued: int(ql[i].Val())}
			if len(vals) >= 4 {
				in.Owner = toStr(vals[0])
				in.Token, _ = strconv.ParseUint(toStr(vals[2]), 10, 64)
				in.Count, _ = strconv.Atoi(toStr(vals[1]))
				in.TTL = time.Duration(max(left, 0)) * time.Millisecond
			}
			out = append(out, in)
		}
		infos, err := b.inspectWeighted(ctx, c, wkeys, wnames)
		if err != nil {
			return nil, err
		}
		out = append(out, infos...)
	}
	return out, nil
}

// hashFault says what makes a lock hash foreign data as the acquire
// script judges it, or "" if nothing does. vals are its fields o, n, f,
// x, w and s (nil when absent); pttl is the hash's PTTL (negative: none).
func hashFault(vals []any, pttl time.Duration) string {
	num := func(v any) (float64, bool) {
		f, err := strconv.ParseFloat(strings.TrimSpace(toStr(v)), 64)
		return f, err == nil
	}
	o, n, f, x, w, s := vals[0], vals[1], vals[2], vals[3], vals[4], vals[5]
	tok, ok := num(f)
	switch {
	case f == nil:
		return "token f is missing"
	case !ok:
		return "token f is not a number"
	case tok < 0 || tok != math.Trunc(tok):
		return "token f is not a non-negative integer"
	case tok >= MaxToken:
		return fmt.Sprintf("token f is at the top of the range (%d): no later token can be given", int64(MaxToken))
	}
	if o != nil {
		if c, ok := num(n); !ok || c < 1 || c != math.Trunc(c) {
			return "count n of a hold is not a positive integer"
		}
		if _, ok := num(x); x == nil && pttl < 0 {
			return "a hold without expiry x has no TTL either"
		} else if x != nil && !ok {
			return "expiry x of a hold is not a number"
		}
	} else if n != nil {
		return "count n without an owner o"
	}
	if _, ok := num(w); w != nil && !ok {
		return "queue length w is not a number"
	}
	if _, ok := num(s); s != nil && !ok {
		return "waiter hint s is not a number"
	}
	return ""
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// foreignHook is the suite's hook to plant foreign data at the lock hashes
// under prefix, through a client from connect for each call, closed after
// it: a client kept across the suite's items would start goroutines inside
// them (a Cluster client's per-node clients), which the leak check counts.
func foreignHook(connect func() goredis.UniversalClient, prefix string) dlocktest.Option {
	plant := func(ctx context.Context, name string, kind dlocktest.ForeignKind) error {
		rdb := connect()
		defer rdb.Close()
		key := dredis.LockKey(prefix, name)
		live := time.Now().Add(time.Hour).UnixMilli()
		var fields []any
		switch kind {
		case dlocktest.ForeignGarbage: // a hold whose token is not a number
			fields = []any{"o", dlocktest.ForeignOwner, "n", 1, "f", "not-a-token", "x", live}
		case dlocktest.ForeignMaxToken: // free, at the largest token
			fields = []any{"f", strconv.FormatInt(dredis.MaxToken, 10)}
		case dlocktest.ForeignBadCount: // a hold with count 0
			fields = []any{"o", dlocktest.ForeignOwner, "n", 0, "f", 5, "x", live}
		default:
			return errors.ErrUnsupported
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			return err
		}
		return rdb.HSet(ctx, key, fields...).Err()
	}
	dump := func(ctx context.Context, name string) (string, error) {
		rdb := connect()
		defer rdb.Close()
		key := dredis.LockKey(prefix, name)
		m, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return "", err
		}
		var s []string
		for k, v := range m {
			s = append(s, k+"="+strconv.Quote(v))
		}
		slices.Sort(s)
		q, err := rdb.LRange(ctx, key+":queue", 0, -1).Result()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %v queue %v", key, s, q), nil
	}
	return dlocktest.PlantForeign(plant, dump)
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// foreignHook is the suite's hook to plant foreign data at a lock's hash
// on every master of g (keys as a backend of g names them).
func foreignHook(t *testing.T, g *testserver.RedisGroup) dlocktest.Option {
	b := open(t, g, "")
	var rdbs []*goredis.Client
	for _, addr := range g.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		rdbs = append(rdbs, c)
	}
	plant := func(ctx context.Context, name string, kind dlocktest.ForeignKind) error {
		key := redlock.LockKey(b, name)
		live := time.Now().Add(time.Hour).UnixMilli()
		var fields []any
		switch kind {
		case dlocktest.ForeignGarbage: // a hold whose fence is not a number
			fields = []any{"o", dlocktest.ForeignOwner, "n", 1, "g", "x1", "f", "not-a-token", "x", live}
		case dlocktest.ForeignMaxToken: // free, at the largest token
			fields = []any{"f", strconv.FormatInt(redlock.MaxToken, 10)}
		case dlocktest.ForeignBadCount: // a hold with count 0
			fields = []any{"o", dlocktest.ForeignOwner, "n", 0, "g", "x1", "f", 5, "x", live}
		default:
			return errors.ErrUnsupported
		}
		for _, c := range rdbs {
			if err := c.Del(ctx, key).Err(); err != nil {
				return err
			}
			if err := c.HSet(ctx, key, fields...).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	dump := func(ctx context.Context, name string) (string, error) {
		key := redlock.LockKey(b, name)
		var out []string
		for _, c := range rdbs {
			m, err := c.HGetAll(ctx, key).Result()
			if err != nil {
				return "", err
			}
			var s []string
			for k, v := range m {
				s = append(s, k+"="+strconv.Quote(v))
			}
			slices.Sort(s)
			out = append(out, fmt.Sprint(s))
		}
		return key + " " + strings.Join(out, " "), nil
	}
	return dlocktest.PlantForeign(plant, dump)
}

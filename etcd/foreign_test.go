package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// foreignHook is the suite's hook to plant foreign data under a lock's
// prefix of b: a key whose value is not dlock's. etcd assigns tokens
// (create revisions), so there is no token to plant at the top of the
// range. Each call connects a client of its own and closes it: a client
// kept across the suite's items would open connections inside them, whose
// goroutines the leak check counts.
func foreignHook(b *etcd.Backend, endpoints []string) dlocktest.Option {
	connect := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	plant := func(ctx context.Context, name string, kind dlocktest.ForeignKind) error {
		cli, err := connect()
		if err != nil {
			return err
		}
		defer cli.Close()
		key := etcd.LockPrefix(b, name) + "foreign"
		switch kind {
		case dlocktest.ForeignGarbage: // no lease, not JSON
			_, err := cli.Put(ctx, key, "someone else's value")
			return err
		case dlocktest.ForeignBadCount: // on a lease, holds 0
			l, err := cli.Grant(ctx, 3600)
			if err != nil {
				return err
			}
			_, err = cli.Put(ctx, key, `{"owner":"`+dlocktest.ForeignOwner+`","holds":0}`, clientv3.WithLease(l.ID))
			return err
		}
		return fmt.Errorf("%w: etcd assigns the tokens", errors.ErrUnsupported)
	}
	dump := func(ctx context.Context, name string) (string, error) {
		cli, err := connect()
		if err != nil {
			return "", err
		}
		defer cli.Close()
		resp, err := cli.Get(ctx, etcd.LockPrefix(b, name), clientv3.WithPrefix())
		if err != nil {
			return "", err
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, fmt.Sprintf("%s=%q(mod %d)", kv.Key, kv.Value, kv.ModRevision))
		}
		return strings.Join(out, " "), nil
	}
	return dlocktest.PlantForeign(plant, dump)
}

package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

// foreignHook is the suite's hook to plant foreign data in the queue of a
// lock, through b's connection: a lock child of dlock's name shape whose
// content is not dlock's. ZooKeeper assigns tokens (czxid), so there is no
// token to plant at the top of the range.
func foreignHook(b *zookeeper.Backend) dlocktest.Option {
	conn := b.Conn()
	acl := zk.WorldACL(zk.PermAll)
	plant := func(ctx context.Context, name string, kind dlocktest.ForeignKind) error {
		var data []byte
		switch kind {
		case dlocktest.ForeignGarbage:
			data = []byte("someone else's node")
		case dlocktest.ForeignBadCount:
			data = []byte(`{"owner":"` + dlocktest.ForeignOwner + `","count":0}`)
		default:
			return fmt.Errorf("%w: ZooKeeper assigns the tokens", errors.ErrUnsupported)
		}
		parent := zookeeper.LockPath(b, name)
		// The parents, as dlock makes them (containers below the root).
		for i := 1; i < len(parent); i++ {
			if parent[i] != '/' {
				continue
			}
			if _, err := conn.Create(parent[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		if _, err := conn.CreateContainer(parent, nil, zk.FlagContainer, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		// Persistent, so that it outlives the test's session like a
		// foreign node would; named like dlock's lock children.
		_, err := conn.Create(parent+"/_c_"+strings.Repeat("f", 32)+"-lock-", data, zk.FlagSequence, acl)
		return err
	}
	dump := func(ctx context.Context, name string) (string, error) {
		parent := zookeeper.LockPath(b, name)
		kids, _, err := conn.Children(parent)
		if err != nil {
			return "", err
		}
		slices.Sort(kids)
		var out []string
		for _, k := range kids {
			d, st, err := conn.Get(parent + "/" + k)
			if err != nil {
				return "", err
			}
			out = append(out, fmt.Sprintf("%s=%q(v%d)", k, d, st.Version))
		}
		return parent + " " + strings.Join(out, " "), nil
	}
	return dlocktest.PlantForeign(plant, dump)
}

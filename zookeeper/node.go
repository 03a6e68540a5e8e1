package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// create makes the waiter's node: an ephemeral sequential child of the
// lock's container, created in one multi with a setData on the container so
// that the answer carries the transaction's zxid (the container's mzxid is
// the new node's czxid: the token), and named like Curator's protected
// nodes, so that when the connection is lost before the answer comes, the
// node is found again by its random id instead of being left behind or
// made twice. A missing container (and root) is created on the way.
func (w *waiter) create(ctx context.Context) error {
	b := w.b
	guid := randHex(guidLen / 2)
	prefix := w.parent + "/" + protectedPrefix + guid + lockMarker
	data := nodeBytes(w.req)
	var last error
	for range 8 {
		v := b.verifyStart()
		res, err := callLate(b, ctx, func() ([]zk.MultiResponse, error) {
			return b.conn.Multi(
				&zk.CreateRequest{Path: prefix, Data: data, Acl: b.cfg.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: w.parent, Data: nil, Version: -1})
		}, func(res []zk.MultiResponse, err error) {
			// The caller gave up while the create was in flight.
			sid, _ := b.session()
			if err == nil && len(res) > 0 {
				b.addOrphan(orphan{parent: w.parent, path: res[0].String, session: sid})
			} else if !answered(err) {
				b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			}
		})
		switch {
		case err == nil && len(res) == 2 && res[1].Stat != nil:
			// The setData's stat is the container's after the create:
			// its mzxid is the multi's zxid, which is the new node's
			// czxid, and one child means the new node is the only one,
			// so first in the queue without reading it.
			sid, _ := b.session()
			w.setNode(res[0].String, res[1].Stat.Mzxid, sid)
			w.alone = res[1].Stat.NumChildren == 1
			w.ver = b.verifyEnd(v)
			return nil
		case err == nil:
			return fmt.Errorf("zookeeper: unexpected multi answer %+v", res)
		case errors.Is(err, zk.ErrNoNode):
			if err := b.ensureParent(ctx, w.parent); err != nil {
				return err
			}
			last = err
			continue
		case answered(err):
			return fmt.Errorf("zookeeper: create in %s: %w", w.parent, err)
		case errors.Is(err, dlock.ErrClosed):
			return err
		}
		// The connection failed: the node may have been made.
		last = err
		sid, _ := b.session()
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return err // the late answer is handled above
			}
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return ctx.Err()
		}
		if errors.Is(err, zk.ErrSessionExpired) {
			continue // a node of the expired session is gone with it
		}
		if werr := b.waitConnected(ctx); werr != nil {
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return werr
		}
		found, ferr := w.find(ctx, guid)
		if ferr != nil {
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return b.unavailable("look for the node after a connection loss in "+w.parent, ferr)
		}
		if found {
			return nil
		}
	}
	return b.unavailable("create in "+w.parent, last)
}

func (w *waiter) setNode(path string, czxid, session int64) {
	w.path, w.czxid, w.session, w.alone, w.ver = path, czxid, session, false, verified{}
	w.name = path[strings.LastIndexByte(path, '/')+1:]
}

// find looks for the node with the random id guid after a connection loss.
// A sync first brings the server up to date with the leader: a create sent
// on the lost connection was either ordered before it (and is seen), or
// reached the leader after the session moved and was refused.
func (w *waiter) find(ctx context.Context, guid string) (bool, error) {
	b := w.b
	if _, err := call(b, ctx, func() (string, error) { return b.conn.Sync(w.parent) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, err
	}
	kids, err := b.children(ctx, w.parent)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, k := range kids {
		if childGUID(k) != guid {
			continue
		}
		path := w.parent + "/" + k
		st, err := b.exists(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		w.setNode(path, st.Czxid, st.EphemeralOwner)
		return true, nil
	}
	return false, nil
}

// ensureParent creates the lock's container, and the root if need be.
func (b *Backend) ensureParent(ctx context.Context, parent string) error {
	mk := func(path string, container bool) error {
		_, err := call(b, ctx, func() (string, error) {
			if container {
				return b.conn.CreateContainer(path, nil, zk.FlagContainer, b.cfg.acl)
			}
			return b.conn.Create(path, nil, zk.FlagPersistent, b.cfg.acl)
		})
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mk(parent, true)
	if errors.Is(err, zk.ErrNoNode) {
		p := ""
		for _, part := range strings.Split(b.cfg.root[1:], "/") {
			p += "/" + part
			if err := mk(p, false); err != nil {
				return b.unavailable("create "+p, err)
			}
		}
		err = mk(parent, true)
	}
	if err != nil {
		return b.unavailable("create "+parent, err)
	}
	return nil
}

type child struct {
	name string
	seq  int64
}

// queue returns the lock children of parent in sequence order.
func queue(kids []string) []child {
	q := make([]child, 0, len(kids))
	for _, k := range kids {
		if s := childSeq(k); s >= 0 {
			q = append(q, child{k, s})
		}
	}
	slices.SortFunc(q, func(a, b child) int {
		if a.seq != b.seq {
			if a.seq < b.seq {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return q
}

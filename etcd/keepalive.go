package etcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keepAlives sends the backend's lease keep-alives, from every renewal,
// acquisition and waiter, on one long-lived LeaseKeepAlive stream, opened
// at first use and again after it breaks, and matches the answers to the
// requests by lease ID, in order. A stream per keep-alive (what
// clientv3.Lease.KeepAliveOnce does) costs etcd a stream set-up each time.
type keepAlives struct {
	leases pb.LeaseClient

	mu      sync.Mutex
	st      *kaStream
	closed  bool
	running sync.WaitGroup // the stream's receiving goroutine
}

type kaStream struct {
	stream  pb.Lease_LeaseKeepAliveClient
	ctx     context.Context
	cancel  context.CancelFunc
	sendMu  sync.Mutex // one Send at a time
	pending map[clientv3.LeaseID][]chan kaReply
}

type kaReply struct {
	ttl int64
	err error
}

var errClosed = errors.New("etcd: backend closed")

// errReset fails the requests pending on a stream that was reset because
// another request's answer did not come in time; it counts as transient.
var errReset = status.Error(codes.Unavailable, "etcd: keep-alive stream reset after an answer did not come in time")

// stream returns the current stream, opening one if there is none. It
// does not wait for a connection: with none ready it fails at once, and
// the caller's retry comes back later.
func (k *keepAlives) streamLocked() (*kaStream, error) {
	if k.closed {
		return nil, errClosed
	}
	if k.st != nil {
		return k.st, nil
	}
	// The stream outlives every caller; it ends with the backend. A member
	// without a leader ends it (instead of holding renewals it cannot
	// pass on).
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	s, err := k.leases.LeaseKeepAlive(ctx, grpc.WaitForReady(false))
	if err != nil {
		cancel()
		return nil, err
	}
	st := &kaStream{stream: s, ctx: ctx, cancel: cancel, pending: make(map[clientv3.LeaseID][]chan kaReply)}
	k.st = st
	k.running.Add(1)
	go k.receive(st)
	return st, nil
}

// receive hands the answers of st to the requests, until st breaks; then
// it fails the requests still waiting.
func (k *keepAlives) receive(st *kaStream) {
	defer k.running.Done()
	for {
		resp, err := st.stream.Recv()
		k.mu.Lock()
		if err != nil {
			if k.st == st {
				k.st = nil
			}
			switch {
			case k.closed:
				err = errClosed
			case st.ctx.Err() != nil:
				err = errReset
			}
			for _, q := range st.pending {
				for _, ch := range q {
					ch <- kaReply{err: err}
				}
			}
			st.pending = nil
			k.mu.Unlock()
			st.cancel()
			return
		}
		id := clientv3.LeaseID(resp.ID)
		if q := st.pending[id]; len(q) > 0 {
			q[0] <- kaReply{ttl: resp.TTL}
			if len(q) == 1 {
				delete(st.pending, id)
			} else {
				st.pending[id] = q[1:]
			}
		}
		k.mu.Unlock()
	}
}

// keepAlive renews the leases ids once and returns the TTL etcd granted
// each (its full TTL, counted from when etcd renewed it; 0 for a lease
// that etcd does not know, which has expired or was revoked). etcd renews
// a lease only while it has not expired: a renewal of an expired lease
// waits for its revocation and answers 0. Every answer is to a request
// sent after keepAlive was called.
func (k *keepAlives) keepAlive(ctx context.Context, ids []clientv3.LeaseID) (map[clientv3.LeaseID]int64, error) {
	out := make(map[clientv3.LeaseID]int64, len(ids))
	var uniq []clientv3.LeaseID
	for _, id := range ids {
		if _, dup := out[id]; !dup {
			out[id] = 0
			uniq = append(uniq, id)
		}
	}
	clear(out)
	if len(uniq) == 0 {
		return out, nil
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	k.mu.Lock()
	st, err := k.streamLocked()
	if err != nil {
		k.mu.Unlock()
		return out, clientv3.ContextError(ctx, err)
	}
	chans := make([]chan kaReply, len(uniq))
	for i, id := range uniq {
		chans[i] = make(chan kaReply, 1)
		st.pending[id] = append(st.pending[id], chans[i])
	}
	k.mu.Unlock()
	// If ctx ends before the answers came (a server that stopped answering;
	// a Send blocked by a full window), the stream is reset: the requests
	// waiting on it fail as transient and the next call opens another.
	defer context.AfterFunc(ctx, st.cancel)()
	// Registered before sent: an answer cannot come before its request is
	// waiting for it. Two requests for one lease are answered in order.
	st.sendMu.Lock()
	for _, id := range uniq {
		if err = st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			break
		}
	}
	st.sendMu.Unlock()
	if err != nil {
		// The stream is broken: its receiver fails the requests, this one's
		// included, and the next call opens another.
		st.cancel()
	}
	for i, ch := range chans {
		select {
		case r := <-ch:
			if r.err != nil {
				return out, clientv3.ContextError(ctx, r.err)
			}
			out[uniq[i]] = r.ttl
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// close ends the stream and waits for its receiver.
func (k *keepAlives) close() {
	k.mu.Lock()
	k.closed = true
	st := k.st
	k.mu.Unlock()
	if st != nil {
		st.cancel()
	}
	k.running.Wait()
}

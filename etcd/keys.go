package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/errkind"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// escape makes a lock name into one key segment: "%" and "/" become %25 and
// %2F, everything else is kept. The mapping is a prefix code, so escape(p)
// is a prefix of escape(n) exactly when p is a prefix of n, and no lock's
// key prefix is a prefix of another lock's.
func escape(name string) string {
	if !strings.ContainsAny(name, "%/") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 2*strings.Count(name, "%") + 2*strings.Count(name, "/"))
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescape reverses escape.
func unescape(seg string) string {
	if !strings.Contains(seg, "%") {
		return seg
	}
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		if seg[i] == '%' && i+2 < len(seg) {
			switch seg[i+1 : i+3] {
			case "25":
				b.WriteByte('%')
				i += 2
				continue
			case "2F":
				b.WriteByte('/')
				i += 2
				continue
			}
		}
		b.WriteByte(seg[i])
	}
	return b.String()
}

// lockPrefix returns the key prefix of the lock called name, ending in "/".
func (b *Backend) lockPrefix(name string) string {
	return b.prefix + "/" + escape(name) + "/"
}

// newKey returns the key of a new acquisition of name (whose lock prefix
// is lp): the shared lease
// it starts on (unique in the cluster) and a number unique among the
// backend's live keys, so that the acquisitions of one backend, which share
// a lease, have keys of their own. A key that the backend deleted at a
// release is used again (see keyPool).
func (b *Backend) newKey(name, lp string, id clientv3.LeaseID) string {
	own := lp + strconv.FormatInt(int64(id), 16) + "-"
	if k, ok := b.keys.take(name, own); ok {
		return k
	}
	return own + strconv.FormatUint(b.seq.Add(1), 16)
}

// made reports whether key is one of this backend's acquisitions' keys,
// which start with the shared lease they were put on: one it still has.
// (A key on a shared lease that the backend no longer has is gone with
// that lease.)
func (b *Backend) made(key string) bool {
	seg := key[strings.LastIndexByte(key, '/')+1:]
	hex, _, ok := strings.Cut(seg, "-")
	id, err := strconv.ParseInt(hex, 16, 64)
	return ok && err == nil && b.isShared(clientv3.LeaseID(id))
}

// keyPool keeps, by lock name, keys of the backend that its releases
// deleted, for the next acquisitions of the name. etcd keeps an index
// entry for every deleted key until the history is compacted, and every
// read of a lock's prefix walks them: a new key per acquisition made each
// acquisition of a busy name slower than the last (on a server without
// auto-compaction, for ever). Only keys put by a single answered attempt
// are kept (no request that could re-create them can still be in flight),
// and only after etcd confirmed their deletion; a re-created key has a
// new create revision, so tokens still increase.
type keyPool struct {
	mu   sync.Mutex
	free map[string][]string
}

const (
	poolPerName = 8    // keys kept per lock name
	poolNames   = 4096 // lock names with keys kept
)

// take returns a kept key of name that starts with own (the key prefix of
// the lease it is for).
func (p *keyPool) take(name, own string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.free[name]
	for len(q) > 0 {
		k := q[len(q)-1]
		q = q[:len(q)-1]
		if strings.HasPrefix(k, own) {
			p.setLocked(name, q)
			return k, true
		}
	}
	p.setLocked(name, q)
	return "", false
}

// put keeps key, of lock name, whose deletion etcd confirmed.
func (p *keyPool) put(name, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = make(map[string][]string)
	}
	q, ok := p.free[name]
	if !ok && len(p.free) >= poolNames {
		for n := range p.free { // make room: forget some name
			delete(p.free, n)
			break
		}
	}
	if len(q) < poolPerName && !slices.Contains(q, key) {
		p.free[name] = append(q, key)
	}
}

func (p *keyPool) setLocked(name string, q []string) {
	if len(q) == 0 {
		delete(p.free, name)
	} else {
		p.free[name] = q
	}
}

// nameOf returns the lock name of a key of this backend, or false.
func (b *Backend) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, b.prefix+"/")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", false
	}
	return unescape(rest[:i]), true
}

// value is what an acquisition's key holds. Holds counts the grants of a
// reentrant owner; a waiting key holds 1 already, since when it becomes the
// lowest key its owner holds the lock. A mutex's key holds only these two;
// the key of a weighted kind also holds the kind, the name's limit and the
// key's weight (see weighted.go), and an election's key the value its
// candidate publishes.
type value struct {
	Owner  string     `json:"owner"`
	Holds  int        `json:"holds"`
	Kind   dlock.Kind `json:"kind,omitempty"`
	Limit  int        `json:"limit,omitempty"`
	Weight int        `json:"weight,omitempty"`
	Value  string     `json:"value,omitempty"` // an election leader's
}

func encode(owner string, holds int) string {
	return encodeValue(value{Owner: owner, Holds: holds})
}

func encodeValue(v value) string {
	if v.Kind == dlock.KindMutex && v.Limit == 0 && v.Weight == 0 && v.Value == "" && plainJSON(v.Owner) {
		// What json.Marshal writes, without its reflection: a mutex's
		// key is written at every acquisition.
		return `{"owner":"` + v.Owner + `","holds":` + strconv.Itoa(v.Holds) + `}`
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// plainJSON reports whether json.Marshal writes s as is between quotes:
// printable ASCII without the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// foreign says what makes kv, a key under a lock's prefix, one that dlock
// did not write, or "": dlock's keys hold JSON with an owner and holds of
// at least 1, and live on a lease (a key without one would hold the lock
// for ever).
func foreign(kv *mvccpb.KeyValue) string {
	var v value
	switch err := json.Unmarshal(kv.Value, &v); {
	case err != nil:
		s := strconv.Quote(string(kv.Value))
		if len(s) > 64 {
			s = s[:61] + "..."
		}
		return "its value " + s + " is not dlock's JSON"
	case v.Owner == "":
		return "it names no owner"
	case v.Holds < 1:
		return fmt.Sprintf("its holds %d is below 1", v.Holds)
	case kv.Lease == 0:
		return "it has no lease, so it would never expire"
	}
	return v.badShape()
}

// badShape says what makes the kind, limit and weight of v impossible, or
// "": a mutex's key has none; a weighted kind's has a limit in
// [1, dlock.MaxLimit] (dlock.RWLimit for a read-write lock, 1 for an
// election) and a weight in [1, limit]; only an election's key has a
// value, of at most dlock.MaxValueLen bytes.
func (v value) badShape() string {
	switch {
	case v.Kind == dlock.KindMutex:
		if v.Limit != 0 || v.Weight != 0 || v.Value != "" {
			return fmt.Sprintf("a mutex's key with limit %d, weight %d and value %q", v.Limit, v.Weight, v.Value)
		}
	case v.Kind > dlock.KindElection:
		return fmt.Sprintf("its kind %d is unknown", v.Kind)
	case v.Limit < 1 || v.Limit > dlock.MaxLimit:
		return fmt.Sprintf("its limit %d is outside [1, %d]", v.Limit, dlock.MaxLimit)
	case v.Weight < 1 || v.Weight > v.Limit:
		return fmt.Sprintf("its weight %d is outside [1, %d], its limit", v.Weight, v.Limit)
	case v.Kind == dlock.KindRWMutex && v.Limit != dlock.RWLimit, v.Kind == dlock.KindElection && v.Limit != 1:
		return fmt.Sprintf("a %s's limit cannot be %d", v.Kind, v.Limit)
	case v.Value != "" && v.Kind != dlock.KindElection:
		return fmt.Sprintf("a %s's key with a value", dlock.Shape(v.Kind, v.Limit))
	case len(v.Value) > dlock.MaxValueLen:
		return fmt.Sprintf("its value is %d bytes, longer than %d", len(v.Value), dlock.MaxValueLen)
	}
	return ""
}

// foreignError is the error of an acquisition whose queue is headed by kv,
// a key that dlock did not write.
func foreignError(kv *mvccpb.KeyValue, why string) error {
	return errkind.Errorf(dlock.ErrForeignData, "etcd: key %q holds data that dlock did not write: %s; nothing was changed", kv.Key, why)
}

func decode(kv *mvccpb.KeyValue) value {
	var v value
	if kv == nil || json.Unmarshal(kv.Value, &v) != nil {
		return value{Holds: -1}
	}
	return v
}

// ttlSeconds is the etcd lease TTL for a requested TTL: rounded up to
// whole seconds, at least 1 (etcd raises it to its own minimum).
func ttlSeconds(ttl time.Duration) int64 {
	return max(dur.Ceil(ttl, time.Second), 1)
}

// transient reports whether err means that etcd could not be reached or
// could not answer for now (no leader, leader changed, timeouts, a
// connection that went away), so that the same request may succeed later.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded || ee.Code() == codes.ResourceExhausted
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, clientv3.ErrNoAvailableEndpoints)
}

// leaseNotFound reports whether err says that etcd does not know a lease.
func leaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) ||
		strings.Contains(fmt.Sprint(err), "requested lease not found")
}

// firstKV returns the first key of a range response in a transaction, or
// nil.
func firstKV(r *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if r == nil || i >= len(r.Responses) {
		return nil
	}
	rr := r.Responses[i].GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}

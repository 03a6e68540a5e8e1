package redis

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dlock-dev/dlock/internal/redisconn"
)

// keys are the Redis keys and the pub/sub channel of one lock. All of them
// carry the same hash tag, {enc}, so that they live in one Cluster slot and
// a script may touch them together.
//
//	PREFIX:{enc}          hash: holder, lease end, fence (see the scripts)
//	PREFIX:{enc}:queue    list: fair waiters' ids in arrival order
//	PREFIX:{enc}:timeouts zset: fair waiters' ids scored by the server time (ms) at which they count as dead
//	PREFIX:{enc}:wake     pub/sub channel: release and queue-head notices
//
// and the fence key that holds the highest token granted in the lock's
// slot, PREFIX:fence:{TAG} (redisconn.FenceKey), which is shared by the
// names of the slot and by the redlock backend, and never expires.
//
// A held lease keeps its keys (its Handle), so they are kept small: the
// key names are only in all, ready as script arguments; the lock, queue
// and timeouts keys are parts of one string. The channel is made when a waiter
// first needs it, and kept.
type keys struct {
	// all holds lock, queue, timeouts and fence as the KEYS of a script.
	all  [4]any
	slot uint16
	ch   atomic.Pointer[string] // the channel, made by the first waiting Lock
}

func (k *keys) lock() string     { return k.all[0].(string) }
func (k *keys) queue() string    { return k.all[1].(string) }
func (k *keys) timeouts() string { return k.all[2].(string) }
func (k *keys) fence() string    { return k.all[3].(string) }

// channel returns the lock's channel. Keys are cached by name (keyCache),
// so a name that is locked again and again builds it once.
func (k *keys) channel() string {
	if ch := k.ch.Load(); ch != nil {
		return *ch
	}
	ch := k.lock() + ":wake"
	k.ch.Store(&ch)
	return ch
}

// newKeys returns the keys of name.
func newKeys(prefix, name string) *keys {
	enc := encodeName(name)
	base := prefix + ":{" + enc + "}"
	const queue, timeouts = ":queue", ":timeouts"
	buf := base + queue + base + timeouts // one allocation for three keys
	n := len(base)
	k := &keys{slot: redisconn.Slot(enc)}
	k.all[0], k.all[1], k.all[2] = buf[:n], buf[:n+len(queue)], buf[n+len(queue):]
	k.all[3] = redisconn.FenceKey(prefix, k.slot)
	return k
}

// keyCache keeps the keys of the lock names a Backend used last, so that
// an acquisition of a name in use does not build them anew.
type keyCache struct {
	prefix string
	mu     sync.RWMutex
	m      map[string]*keys
}

// keyCacheSize bounds the names a keyCache keeps; when it is full it is
// emptied.
const keyCacheSize = 4096

func (c *keyCache) get(name string) *keys {
	c.mu.RLock()
	k := c.m[name]
	c.mu.RUnlock()
	if k != nil {
		return k
	}
	k = newKeys(c.prefix, name)
	c.mu.Lock()
	if len(c.m) >= keyCacheSize || c.m == nil {
		c.m = make(map[string]*keys)
	}
	c.m[name] = k
	c.mu.Unlock()
	return k
}

// encodeName escapes a lock name for use inside a hash tag and a SCAN
// pattern (see redisconn.EncodeName, which redlock's keys share).
func encodeName(name string) string { return redisconn.EncodeName(name) }

// escapeByte reports whether encodeName escapes c.
func escapeByte(c byte) bool { return redisconn.NameEscapes(c) }

// decodeName reverses encodeName.
func decodeName(enc string) (string, error) {
	if !strings.Contains(enc, "%") {
		return enc, nil
	}
	var b strings.Builder
	b.Grow(len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(enc) {
			return "", fmt.Errorf("bad escape at the end of %q", enc)
		}
		hi, ok1 := unhex(enc[i+1])
		lo, ok2 := unhex(enc[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("bad escape %q in %q", enc[i:i+3], enc)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// validPrefix reports why p cannot be a key prefix, or "".
func validPrefix(p string) string {
	if p == "" {
		return "is empty"
	}
	if len(p) > 64 {
		return "is longer than 64 bytes"
	}
	for i := 0; i < len(p); i++ {
		if escapeByte(p[i]) && p[i] != '%' {
			return fmt.Sprintf("contains %q (braces, glob characters and control bytes are not allowed)", p[i])
		}
	}
	return ""
}

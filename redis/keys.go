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
// slot (see fenceMode), which is shared by many names and never expires.
//
// A held lease keeps its keys (its Handle), so they are kept small: the
// key names are only in all, ready as script arguments; the lock, queue
// and timeouts keys are parts of one string, and on a single server every
// lock shares the fence key's argument. The channel is made when a waiter
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

// fenceMode says where the fence key of a lock is.
type fenceMode uint8

const (
	// fenceOne: one key, PREFIX:fence, for every lock (a single server or
	// a Sentinel-managed master, where any keys may go into one script).
	fenceOne fenceMode = iota
	// fenceSlot: one key per Cluster slot, PREFIX:fence:{TAG}, where TAG is
	// the first decimal number (0, 1, 2, ...) whose slot is the lock's:
	// at most 16384 keys, whatever the number of names.
	fenceSlot
)

// newKeys returns the keys of name; fenceArg, if not nil, is the fence key
// of fenceOne as a script argument, to share.
func newKeys(prefix, name string, mode fenceMode, fenceArg any) *keys {
	enc := encodeName(name)
	base := prefix + ":{" + enc + "}"
	const queue, timeouts = ":queue", ":timeouts"
	buf := base + queue + base + timeouts // one allocation for three keys
	n := len(base)
	k := &keys{slot: redisconn.Slot(enc)}
	k.all[0], k.all[1], k.all[2] = buf[:n], buf[:n+len(queue)], buf[n+len(queue):]
	switch {
	case mode == fenceSlot:
		k.all[3] = prefix + ":fence:{" + redisconn.SlotTag(k.slot) + "}"
	case fenceArg != nil:
		k.all[3] = fenceArg
	default:
		k.all[3] = prefix + ":fence"
	}
	return k
}

// keyCache keeps the keys of the lock names a Backend used last, so that
// an acquisition of a name in use does not build them anew.
type keyCache struct {
	prefix   string
	fence    fenceMode
	fenceArg any // PREFIX:fence as a script argument, made at the first get
	mu       sync.RWMutex
	m        map[string]*keys
}

// keyCacheSize bounds the names a keyCache keeps; when it is full it is
// emptied.
const keyCacheSize = 4096

func (c *keyCache) get(name string) *keys {
	c.mu.RLock()
	k := c.m[name]
	fenceArg := c.fenceArg
	c.mu.RUnlock()
	if k != nil {
		return k
	}
	k = newKeys(c.prefix, name, c.fence, fenceArg)
	c.mu.Lock()
	if len(c.m) >= keyCacheSize || c.m == nil {
		c.m = make(map[string]*keys)
	}
	if c.fence == fenceOne && c.fenceArg == nil {
		c.fenceArg = k.all[3]
	}
	c.m[name] = k
	c.mu.Unlock()
	return k
}

// encodeName escapes a lock name for use inside a hash tag and a SCAN
// pattern: the bytes { } % and the glob characters * ? [ ] \ as well as
// ASCII control bytes become %XX; everything else (including UTF-8) is kept.
// The encoding works byte by byte, so the encoding of a prefix of a name is
// a prefix of the encoding of the name.
func encodeName(name string) string { return redisconn.Escape(name, escapeByte) }

func escapeByte(c byte) bool {
	switch c {
	case '{', '}', '%', '*', '?', '[', ']', '\\':
		return true
	}
	return c < 0x20 || c == 0x7f
}

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

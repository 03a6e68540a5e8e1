package redlock

import goredis "github.com/redis/go-redis/v9"

func init() { countForTests = true }

// Woken returns how many times release notices woke a waiter of b.
func Woken(b *Backend) int64 { return b.woken.n.Load() }

// Received returns how many release notices b received.
func Received(b *Backend) int64 { return b.received.n.Load() }

// Passed returns how many releases of b sent a parked fair waiter's
// attempt along.
func Passed(b *Backend) int64 { return b.passed.n.Load() }

// HandedWon returns how many attempts sent along by a release got a
// waiter of b the lock.
func HandedWon(b *Backend) int64 { return b.handedWon.n.Load() }

// WaiterID returns the id of waiter w in the masters' queues.
func WaiterID(w any) string { return w.(*waiter).qid }

// LockKey returns the key of the hash of lock name on every master of b.
func LockKey(b *Backend, name string) string { return b.lockKey(name) }

// SetPubSubClients makes b's pub/sub connections to master i with cs[i]
// instead of b's client; call it before b's first waiter.
func SetPubSubClients(b *Backend, cs []*goredis.Client) {
	for i, c := range cs {
		b.notices[i].client = c
	}
}

// Parked returns how many fair waiters of this process, on b's masters,
// wait for a release of name.
func Parked(b *Backend, name string) int {
	parked.mu.Lock()
	defer parked.mu.Unlock()
	return len(parked.by[b.parkKey(name)])
}

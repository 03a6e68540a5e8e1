package redis

import goredis "github.com/redis/go-redis/v9"

// LockKey returns the key of the hash of lock name under prefix, for the
// tests that plant data there.
func LockKey(prefix, name string) string { return newKeys(prefix, name).lock() }

// FenceKey returns the fence key of lock name under prefix.
func FenceKey(prefix, name string) string { return newKeys(prefix, name).fence() }

// SetPubSubClient makes b's pub/sub connections with c instead of b's
// client; call it before b's first waiter.
func SetPubSubClient(b *Backend, c *goredis.Client) { b.mux.client = c }

// ClockTokensOf reports whether b grants with clock tokens on its common
// path (ClockTokens, or its default).
func ClockTokensOf(b *Backend) bool { return b.acquire == acquireClockScript }

package redis

// LockKey returns the key of the hash of lock name under prefix, for the
// tests that plant data there.
func LockKey(prefix, name string) string { return newKeys(prefix, name, fenceOne).lock }

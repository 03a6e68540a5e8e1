package etcd

// LockPrefix returns the key prefix of lock name's queue on b.
func LockPrefix(b *Backend, name string) string { return b.lockPrefix(name) }

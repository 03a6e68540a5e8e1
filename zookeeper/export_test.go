package zookeeper

// LockPath returns the parent node of lock name's queue on b.
func LockPath(b *Backend, name string) string { return b.lockPath(name) }

package zookeeper

// LockPath returns the parent node of lock name's queue on b.
func LockPath(b *Backend, name string) string { return b.lockPath(name) }

// WatchArmed reports whether b's recursive watch is set on its current
// connection.
func WatchArmed(b *Backend) bool { return b.wire != nil && b.wire.watchGen() != 0 }

// ArmHolds is how many holds make a backend set its recursive watch.
const ArmHolds = armHolds

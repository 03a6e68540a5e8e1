package zookeeper

import "github.com/go-zookeeper/zk"

// LockPath returns the parent node of lock name's queue on b.
func LockPath(b *Backend, name string) string { return b.lockPath(name) }

// Conn returns b's ZooKeeper connection, for tests that plant nodes.
func Conn(b *Backend) *zk.Conn { return b.conn }

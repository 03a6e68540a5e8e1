package main

// The backends dlock can use, one import each: a backend package registers
// its URL schemes with dlock.Register when it is imported.
import (
	_ "github.com/dlock-dev/dlock/etcd"
	_ "github.com/dlock-dev/dlock/mem"
	_ "github.com/dlock-dev/dlock/mysql"
	_ "github.com/dlock-dev/dlock/postgres"
	_ "github.com/dlock-dev/dlock/redis"
	_ "github.com/dlock-dev/dlock/redlock"
	_ "github.com/dlock-dev/dlock/sqlite"
	_ "github.com/dlock-dev/dlock/zookeeper"
)

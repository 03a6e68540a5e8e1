package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
)

// driverLogs sends the log lines of the drivers that have a process-wide
// logger (go-redis, go-sql-driver/mysql), which the library silences, to
// l at debug level: dlock shows them with --verbose. It must be called
// before a backend is opened, from one goroutine.
func driverLogs(l *slog.Logger) {
	goredis.SetLogger(redisLogger{l})
	mysql.SetLogger(mysqlLogger{l})
}

// redisLogger is go-redis's logger on slog.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, args ...any) {
	if r.l.Enabled(ctx, slog.LevelDebug) {
		r.l.DebugContext(ctx, "redis: "+strings.TrimPrefix(fmt.Sprintf(format, args...), "redis: "))
	}
}

// mysqlLogger is go-sql-driver/mysql's logger on slog.
type mysqlLogger struct{ l *slog.Logger }

func (m mysqlLogger) Print(v ...any) {
	if m.l.Enabled(context.Background(), slog.LevelDebug) {
		m.l.Debug("mysql: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}

package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// ErrForeignData means that a key dlock uses for a lock holds data that
// dlock did not write (another type, a field it cannot read, a token at
// [MaxToken]). The operation changed nothing; the error names the key.
// Remove the data or choose another [KeyPrefix]. It is
// [dlock.ErrForeignData], kept here under its earlier name.
var ErrForeignData = dlock.ErrForeignData

// ErrServerTooOld means the Redis server is older than [MinServerVersion]
// and lacks commands the scripts use.
var ErrServerTooOld = errors.New("redis: server too old")

// MinServerVersion is the oldest Redis server version the backend runs on.
const MinServerVersion = "6.0.0"

// classify wraps a go-redis error with the dlock sentinel it stands for:
// ErrBackendUnavailable for transport failures and for server states that
// pass (loading, failover, cluster down), and also for authentication
// failures, which make the store unusable. Context errors are returned as
// they are, so that callers can match ctx.Err().
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if isDialErr(err) {
			return fmt.Errorf("%w: %w", dlock.ErrBackendUnavailable, err)
		}
		return err
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case hasPrefix(msg, "NOAUTH", "WRONGPASS", "NOPERM") || strings.Contains(msg, "invalid password") || strings.Contains(msg, "AUTH <password> called without any password"):
			return fmt.Errorf("%w: authentication failed: %w", dlock.ErrBackendUnavailable, err)
		case hasPrefix(msg, "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY", "NOREPLICAS", "MISCONF"):
			return fmt.Errorf("%w: %w", dlock.ErrBackendUnavailable, err)
		case strings.Contains(msg, "unknown command") || strings.Contains(msg, "Unknown Redis command"):
			return fmt.Errorf("%w (need Redis %s or later): %w", ErrServerTooOld, MinServerVersion, err)
		}
		return err
	}
	if errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("%w: the go-redis client is closed: %w", dlock.ErrBackendUnavailable, err)
	}
	return fmt.Errorf("%w: %w", dlock.ErrBackendUnavailable, err)
}

// isDialErr reports whether err is a failure to connect, after which
// nothing was sent.
func isDialErr(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "dial tcp")
}

func hasPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// isRedisReply reports whether err is an error reply of the server, which
// means the command was received and answered: its outcome is known.
func isRedisReply(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr)
}

// uncertain reports whether a command that failed with err may have been
// executed by the server without the client learning of it.
func uncertain(err error) bool {
	if err == nil || isRedisReply(err) || isNotSent(err) {
		return false
	}
	return !isDialErr(err)
}

// parseVersion parses "7.0.15" into comparable parts.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	parts := strings.SplitN(strings.TrimSpace(v), ".", 3)
	if len(parts) < 2 {
		return out, false
	}
	for i, p := range parts {
		// Allow suffixes such as "7.2.4-rc1".
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// versionOK reports whether the server version v is at least
// MinServerVersion.
func versionOK(v string) bool {
	have, ok := parseVersion(v)
	if !ok {
		return true // unknown format: let the scripts decide
	}
	want, _ := parseVersion(MinServerVersion)
	for i := range have {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

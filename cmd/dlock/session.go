package main

import (
	"context"
	"net/url"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
)

// sessionParam is the URL parameter of ZooKeeper's session timeout.
const sessionParam = "session_timeout"

// open opens the backend as backendFlags.open does, except that a
// ZooKeeper URL without a session_timeout is opened with a session timeout
// of the lock's TTL: ZooKeeper keeps a dead holder's node for the session
// timeout, and --ttl promises how long the backend keeps the lock after
// dlock dies. One session holds all of a backend's locks, so the library
// cannot follow each lock's TTL; dlock takes one lock and can. When the
// servers grant a longer session timeout than the TTL (their
// minSessionTimeout), the TTL is refused with exit 2, as the library
// refuses a TTL above the session timeout. The URL returned is the one
// the user gave (for the command's DLOCK_URL).
func (f *runFlags) open(ctx context.Context, e *env, cmd string) (*dlock.Client, string, int) {
	raw, err := backendURL(f.url, e.getenv)
	if err != nil {
		return f.backendFlags.open(ctx, e, cmd) // which reports it
	}
	ttl := dlock.DefaultTTL
	if f.ttl.set {
		ttl = f.ttl.d
	}
	withTTL, ok := sessionURL(raw, ttl)
	if !ok {
		return f.backendFlags.open(ctx, e, cmd)
	}
	b := f.backendFlags
	b.url = withTTL
	client, _, code := b.open(ctx, e, cmd)
	if client == nil {
		return nil, raw, code
	}
	if st, ok := client.Backend().(interface{ SessionTimeout() time.Duration }); ok {
		if got := st.SessionTimeout(); got > ttl {
			client.Close()
			e.errorf("%s: --ttl %v is below the shortest session timeout that the servers of %s grant, %v (their minSessionTimeout, 2 tickTimes by default): a dlock that died would keep lock %q for %v, not %v; give --ttl %v or more (or session_timeout=%v in the URL to accept that)",
				cmd, ttl, client, got, f.name, got, ttl, got, got)
			return nil, raw, exitUsage
		}
	}
	return client, raw, exitOK
}

// sessionURL returns rawURL with a session_timeout of ttl, and true, when
// it is a ZooKeeper URL without a session_timeout; otherwise false. A TTL
// below dlock.MinTTL is left for the library to refuse.
func sessionURL(rawURL string, ttl time.Duration) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || !isZooKeeper(u.Scheme) || ttl < dlock.MinTTL {
		return rawURL, false
	}
	q := u.Query()
	if q.Has(sessionParam) {
		return rawURL, false
	}
	q.Set(sessionParam, ttl.String())
	u.RawQuery = q.Encode()
	return u.String(), true
}

// isZooKeeper reports whether scheme is one that the zookeeper package
// registers, by asking its ParseURL (which refuses every other scheme)
// about a minimal URL of that scheme.
func isZooKeeper(scheme string) bool {
	_, _, err := zookeeper.ParseURL(&url.URL{Scheme: scheme, Host: "localhost"})
	return err == nil
}

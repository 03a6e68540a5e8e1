package sqlite

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
)

func init() {
	dlock.Register("sqlite", func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
		path, opts, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return open(ctx, path, opts)
	})
}

// ParseURL returns the file path and the options of an "sqlite" URL (see
// the package doc for its forms). Errors match [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (path string, opts []Option, err error) {
	const forms = "want sqlite:///abs/path.db, sqlite:rel/path.db or sqlite://./rel/path.db"
	switch {
	case u.Scheme != "sqlite":
		return "", nil, invalid("URL scheme %q is not sqlite", u.Scheme)
	case u.User != nil:
		return "", nil, invalid("URL %q has user information; %s", u.Redacted(), forms)
	case u.Fragment != "":
		return "", nil, invalid("URL %q has a fragment; %s", u.Redacted(), forms)
	case u.Opaque != "":
		path, err = url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, invalid("URL %q: %v", u.Redacted(), err)
		}
	case u.Host == "":
		path = u.Path
	case u.Host == "." || u.Host == "..":
		path = u.Host + u.Path
	default:
		return "", nil, invalid("URL %q names host %q: the database is a local file; %s", u.Redacted(), u.Host, forms)
	}
	if path == "" || path == "/" {
		return "", nil, invalid("URL %q has no file path; %s", u.Redacted(), forms)
	}
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vs := q[k]
		if len(vs) != 1 {
			return "", nil, invalid("URL parameter %s is given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "table":
			opts = append(opts, Table(v))
		case "synchronous":
			opts = append(opts, Synchronous(v))
		case "busy_timeout", "waiter_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", nil, invalid("URL parameter %s=%q is not a duration such as 5s or 500ms", k, v)
			}
			if k == "busy_timeout" {
				opts = append(opts, BusyTimeout(d))
			} else {
				opts = append(opts, WaiterTimeout(d))
			}
		case connect.Param:
			d, err := connect.ParseTimeout(v)
			if err != nil {
				return "", nil, invalid("URL parameter %v", err)
			}
			opts = append(opts, ConnectTimeout(d))
		default:
			return "", nil, invalid("unknown URL parameter %q (known: %s)", k, strings.Join([]string{"busy_timeout", connect.Param, "synchronous", "table", "waiter_timeout"}, ", "))
		}
	}
	return path, opts, nil
}

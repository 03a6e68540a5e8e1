package sqlite

import (
	"net/url"

	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/urlq"
)

func init() { connect.Register([]string{"sqlite"}, ParseURL, Open) }

// ParseURL returns the file path and the options of an "sqlite" URL (see
// the package doc for its forms). Its parameters are table,
// waiter_timeout, connect_timeout, busy_timeout (a Go duration) and
// synchronous; any other, or one given twice, is an error matching
// [dlock.ErrInvalidOption], as every bad value is.
func ParseURL(u *url.URL) (path string, opts []Option, err error) {
	const forms = "want sqlite:///abs/path.db, sqlite:rel/path.db or sqlite://./rel/path.db"
	q := urlq.Parse("sqlite", u)
	switch {
	case u.Scheme != "sqlite":
		return "", nil, q.Errorf("scheme %q is not sqlite", u.Scheme)
	case u.User != nil:
		return "", nil, q.Errorf("has user information; %s", forms)
	case u.Fragment != "":
		return "", nil, q.Errorf("has a fragment; %s", forms)
	case u.Opaque != "":
		path, err = url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, q.Errorf("%v", err)
		}
	case u.Host == "":
		path = u.Path
	case u.Host == "." || u.Host == "..":
		path = u.Host + u.Path
	default:
		return "", nil, q.Errorf("names host %q: the database is a local file; %s", u.Host, forms)
	}
	if path == "" || path == "/" {
		return "", nil, q.Errorf("has no file path; %s", forms)
	}
	for _, set := range sqllock.URLParams(q, false) {
		opts = append(opts, shared(set))
	}
	urlq.Add(&opts, "busy_timeout", q.Duration, BusyTimeout)
	urlq.Add(&opts, "synchronous", q.String, Synchronous)
	if _, err := q.Done(nil); err != nil {
		return "", nil, err
	}
	return path, opts, nil
}

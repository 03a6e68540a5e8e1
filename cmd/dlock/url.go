package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/dlock-dev/dlock"
	dconnect "github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/redact"
)

// urlFlag defines the --url and --connect-timeout flags of the commands
// that open a backend.
// backendUsage is the middle of the help text of the commands that only
// talk to the backend (status, migrate): their flags, where the backend
// comes from, and the heading of their exit statuses.
const backendUsage = `Flags:
%FLAGS%
Backend:
  --url, else $DLOCK_URL, else the SQLite file in the state directory
  (sqlite://$XDG_STATE_HOME/dlock/locks.db, or ~/.local/state/dlock/locks.db).

Exit status:
`

func urlFlag(fs *flag.FlagSet, url *string, connect *optDuration) {
	fs.StringVar(url, "url", "", "the backend's URL (default: $DLOCK_URL, else the SQLite file\nin the state directory)")
	fs.Var(connect, "connect-timeout", "how long to wait to reach the backend (default: the URL's\nconnect_timeout parameter, else 10s); it replaces that\nparameter; 0: no limit, wait as long as it takes")
}

// backendFlags are the flags of the commands that open a backend through
// the library: --url, --connect-timeout and --verbose.
type backendFlags struct {
	url     string
	connect optDuration
	verbose bool
}

// define defines the flags; verbose says what --verbose logs.
func (b *backendFlags) define(fs *flag.FlagSet, verbose string) {
	urlFlag(fs, &b.url, &b.connect)
	fs.BoolVar(&b.verbose, "verbose", false, verbose)
}

// open opens the backend of --url within the open limit (see openContext
// and openClient), for a command that locks or lists locks across
// processes: a backend in dlock's own process (mem://) is refused.
func (b *backendFlags) open(ctx context.Context, e *env, cmd string) (*dlock.Client, string, int) {
	raw, err := backendURL(b.url, e.getenv)
	if err != nil {
		e.errorf("%v", err)
		return nil, "", urlErrorCode(err)
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme == "mem" {
		e.errorf("%s: %s is a backend in dlock's own process: each dlock %s would have its own locks and exclude nothing; use the default SQLite file, an sqlite:// URL shared by the processes, or a server backend", cmd, redact.URL(u), cmd)
		return nil, raw, exitUsage
	}
	ctx, cancel := openContext(ctx, raw, b.connect)
	defer cancel()
	return openClient(ctx, e, raw, b.connect, b.verbose)
}

// withConnectTimeout returns rawURL with its connect_timeout parameter
// set to d, and without the parameters that mean the same for one backend
// (mysql's timeout, etcd's dial-timeout), which may not be given with it.
func withConnectTimeout(rawURL string, d time.Duration) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, which may carry a password
		}
		return "", fmt.Errorf("malformed URL: %w", err)
	}
	q := u.Query()
	switch u.Scheme {
	case "mysql":
		q.Del("timeout")
	case "etcd":
		q.Del("dial-timeout")
	}
	q.Set("connect_timeout", d.String())
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// openContext bounds the whole opening of a backend (tables created
// included): openTimeout, or twice the connect timeout if that is longer.
// The connect timeout is --connect-timeout, else the URL's
// connect_timeout; 0 means no limit, as it does in the library, rather
// than a limit of openTimeout that the user did not ask for.
func openContext(ctx context.Context, rawURL string, connect optDuration) (context.Context, context.CancelFunc) {
	d, ok := connectTimeout(rawURL, connect)
	switch {
	case ok && d == 0:
		return context.WithCancel(ctx)
	case ok:
		return context.WithTimeout(ctx, max(openTimeout, 2*d))
	}
	return context.WithTimeout(ctx, openTimeout)
}

// connectTimeout returns the connect timeout a command opens rawURL
// with: --connect-timeout, else the URL's connect_timeout; ok is false
// when neither is given (the backend's default applies).
func connectTimeout(rawURL string, connect optDuration) (d time.Duration, ok bool) {
	if connect.set {
		return connect.d, true
	}
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has(dconnect.Param) {
		d, err = dconnect.ParseTimeout(u.Query().Get(dconnect.Param))
		return d, err == nil // a bad value is the backend's to report
	}
	return 0, false
}

// errConfig marks an error of dlock's configuration (exit 2): no URL can
// be made.
var errConfig = errors.New("configuration error")

// urlErrorCode is the exit code of an error of backendURL: exitUsage for
// a configuration error, exitBackend for the default database's
// directory that cannot be created.
func urlErrorCode(err error) int {
	if errors.Is(err, errConfig) {
		return exitUsage
	}
	return exitBackend
}

// backendURL returns the URL of the backend to use: flagURL when given,
// else $DLOCK_URL, else the default SQLite file (see defaultURL).
func backendURL(flagURL string, getenv func(string) string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if u := getenv("DLOCK_URL"); u != "" {
		return u, nil
	}
	return defaultURL(getenv)
}

// defaultURL returns sqlite:///STATE/dlock/locks.db, where STATE is
// $XDG_STATE_HOME (if it is an absolute path, as the XDG base directory
// specification requires) or ~/.local/state, and creates STATE/dlock with
// mode 0700 if it does not exist.
func defaultURL(getenv func(string) string) (string, error) {
	state := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home := getenv("HOME")
		if home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", fmt.Errorf("%w: no --url, no $DLOCK_URL and no home directory for the default lock database (set HOME, XDG_STATE_HOME or DLOCK_URL): %v", errConfig, err)
			}
		}
		state = filepath.Join(home, ".local", "state")
	}
	dir := filepath.Join(state, "dlock")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the directory of the default lock database: %w", err)
	}
	u := url.URL{Scheme: "sqlite", Path: filepath.ToSlash(filepath.Join(dir, "locks.db"))}
	return u.String(), nil
}

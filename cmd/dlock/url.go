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
	fs.Var(connect, "connect-timeout", "how long to wait to reach the backend (default: the URL's\nconnect_timeout parameter, else 10s); it replaces that\nparameter")
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

// open opens the backend of --url within openLimit (see openClient).
func (b *backendFlags) open(ctx context.Context, e *env) (*dlock.Client, string, int) {
	ctx, cancel := context.WithTimeout(ctx, openLimit(b.connect))
	defer cancel()
	return openClient(ctx, e, b.url, b.connect, b.verbose)
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

// openLimit bounds the whole opening of a backend (tables created
// included): openTimeout, or twice the connect timeout if that is longer.
func openLimit(connect optDuration) time.Duration {
	if connect.set {
		return max(openTimeout, 2*connect.d)
	}
	return openTimeout
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
				return "", fmt.Errorf("no --url, no $DLOCK_URL and no home directory for the default lock database: %w", err)
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

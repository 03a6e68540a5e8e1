// Package connect is what every backend's Open shares for reaching its
// store: the connect_timeout URL parameter, a probe that watches the
// connections made while opening, and the one message that says why the
// store could not be reached (refused, not that kind of server,
// authentication, TLS, timeout).
package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// Param is the name of the URL parameter every backend takes.
const Param = "connect_timeout"

// ParseTimeout parses a connect_timeout value: a Go duration ("3s") or a
// whole number of seconds ("10", libpq's form). 0 means no limit but the
// context's.
func ParseTimeout(v string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(365*24*time.Hour/time.Second) {
			return 0, fmt.Errorf("%s=%q is too long", Param, v)
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("%s=%q is not a duration such as 10s or 500ms, or a number of seconds", Param, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s=%q is negative", Param, v)
	}
	return d, nil
}

// Take removes connect_timeout from q and returns its value, or def when
// q has none.
func Take(q map[string][]string, def time.Duration) (time.Duration, error) {
	vs, ok := q[Param]
	if !ok {
		return def, nil
	}
	delete(q, Param)
	return ParseTimeout(vs[len(vs)-1])
}

// Bound returns ctx limited to d from now; d <= 0 leaves ctx as it is.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, d, &timeoutError{d})
}

// timeoutError is the cause of a context that Bound ended.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("connect_timeout %v passed", e.d)
}

func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Error is the error of an Open that could not reach its store. It
// matches dlock.ErrBackendUnavailable and its cause.
type Error struct {
	Backend string // "postgres", "zookeeper", ...
	Addr    string // the address (or addresses) tried
	Reason  string // what went wrong, for a person
	Err     error  // the cause, or nil
}

func (e *Error) Error() string {
	s := e.Backend + " " + e.Addr + ": " + e.Reason
	if e.Err != nil {
		// One line: pgx puts each address it tried on a line of its own.
		s += ": " + oneLine.Replace(e.Err.Error())
	}
	return s
}

// Unwrap returns dlock.ErrBackendUnavailable and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{dlock.ErrBackendUnavailable}
	}
	return []error{dlock.ErrBackendUnavailable, e.Err}
}

var oneLine = strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ")

// Server describes the kind of store a backend expects, for messages.
type Server struct {
	Backend string // the backend's name: "postgres"
	Kind    string // the server's name: "PostgreSQL"
	// Auth reports whether err is the server refusing the credentials.
	Auth func(err error) bool
	// Answer reports whether err is an error answer of a server of this
	// kind (which it then is), for example "-LOADING" from Redis.
	Answer func(err error) bool
}

// ErrorOf returns a test for [Server]'s Auth or Answer: whether err is,
// or wraps, an error of the driver's type E that match accepts (nil: any).
func ErrorOf[E error](match func(E) bool) func(err error) bool {
	return func(err error) bool {
		var e E
		return errors.As(err, &e) && (match == nil || match(e))
	}
}

// Explain returns the error of an Open of s at addr that failed with err,
// saying why from err, from what the probe p (may be nil) saw on the wire,
// and from ctx (the context Open was bounded by).
func (s Server) Explain(ctx context.Context, addr string, p *Probe, err error) *Error {
	e := &Error{Backend: s.Backend, Addr: addr, Err: err}
	var seen Seen
	if p != nil {
		seen = p.Seen()
	}
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case s.Auth != nil && err != nil && s.Auth(err):
		e.Reason = "authentication failed"
	case errors.As(err, &certErr) || errors.As(err, &recErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) ||
		err != nil && strings.Contains(err.Error(), "tls: "):
		e.Reason = "TLS handshake failed"
	case err != nil && strings.Contains(err.Error(), "refused TLS"):
		e.Reason = "TLS handshake failed: the server does not offer TLS"
	case s.Answer != nil && err != nil && s.Answer(err):
		e.Reason = "the server answered with an error"
	case errors.Is(err, syscall.ECONNREFUSED) || !seen.Connected && errors.Is(seen.DialErr, syscall.ECONNREFUSED):
		e.Reason = "connection refused (is the " + s.Kind + " server running and listening there?)"
	case seen.Connected && len(seen.First) > 0:
		e.Reason = fmt.Sprintf("not %s server: it answered %s", s.a(), quote(seen.First))
	case seen.Connected && seen.PeerClosed:
		e.Reason = fmt.Sprintf("it closed the connection without an answer (not %s server, or one that turned the client away)", s.a())
	case (ctx.Err() != nil || isTimeout(err)) && seen.Connected:
		e.Reason = fmt.Sprintf("connected, but no %s answer %s (not %s server, or an overloaded one)", s.Kind, ended(ctx), s.a())
	case ctx.Err() != nil || isTimeout(err):
		e.Reason = "no connection " + ended(ctx)
	case seen.DialErr != nil || isDialError(err):
		e.Reason = "cannot connect"
	default:
		e.Reason = "cannot use the server"
	}
	switch {
	case err == nil:
		e.Err = ctx.Err()
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		// The driver's error does not say that the wait ended; say it.
		e.Err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return e
}

// a returns the server's kind with its article: "a Redis", "an etcd".
func (s Server) a() string {
	if strings.ContainsAny(s.Kind[:1], "aeiouAEIOU") {
		return "an " + s.Kind
	}
	return "a " + s.Kind
}

// ended says how a context ended: "within connect_timeout 3s", "before
// the context's deadline", "before the context was cancelled".
func ended(ctx context.Context) string {
	var te *timeoutError
	switch {
	case errors.As(context.Cause(ctx), &te):
		return fmt.Sprintf("within connect_timeout %v", te.d)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "before the context's deadline"
	case ctx.Err() != nil:
		return "before the context was cancelled"
	}
	// A driver timeout set from connect_timeout fires with the context's
	// deadline, sometimes a moment before it: then the deadline is the
	// cause to name.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < deadlineSlack {
		select {
		case <-ctx.Done():
			return ended(ctx)
		case <-time.After(time.Until(dl) + deadlineSlack):
		}
	}
	return "within the driver's own timeout"
}

// deadlineSlack is how close to the context's deadline a driver's timeout
// counts as that deadline's.
const deadlineSlack = 50 * time.Millisecond

// isTimeout reports whether err is a network timeout of the driver's own
// (a read deadline, a dial timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// quote shows the first bytes a server sent, cut to 40.
func quote(b []byte) string {
	const max = 40
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

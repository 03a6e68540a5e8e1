package dlock

import "time"

// DefaultConnectTimeout bounds how long a backend's Open (and [Open]) waits
// to reach its store when neither the context nor the URL's
// connect_timeout parameter sets a shorter limit. Every backend's URL takes
// connect_timeout: a Go duration ("3s", "500ms") or a whole number of
// seconds ("10", as libpq writes it); 0 means no limit but the context's.
// When the limit or the context ends first, Open returns an error matching
// [ErrBackendUnavailable] that names the backend and the address and says
// what went wrong: the connection was refused, the server is not that kind
// of server, the login or TLS handshake failed, or no answer came in time.
const DefaultConnectTimeout = 10 * time.Second

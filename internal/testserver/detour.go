package testserver

import (
	"context"
	"net"
	"sync/atomic"
)

// Detour sends a client's connections through a [Proxy] until Silence,
// then straight to the server, while the proxy swallows the replies on
// the connections it carries: they stay open and silent, as after a NAT
// entry or a route is lost. Give Dial to the client as its dialer.
type Detour struct {
	*Proxy
	silenced atomic.Bool
	direct   atomic.Int32
}

// NewDetour starts a Detour to target (host:port).
func NewDetour(t T, target string) *Detour {
	return &Detour{Proxy: NewProxy(t, target)}
}

// Dial dials the proxy, or the server once the detour is silenced.
func (d *Detour) Dial(ctx context.Context, network, _ string) (net.Conn, error) {
	addr := d.Addr()
	if d.silenced.Load() {
		d.direct.Add(1)
		addr = d.target
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// Silence makes the proxy swallow every reply and later dials go straight
// to the server.
func (d *Detour) Silence() {
	d.Swallow()
	d.silenced.Store(true)
}

// Direct returns how many connections were dialed since Silence.
func (d *Detour) Direct() int { return int(d.direct.Load()) }

package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/dlock-dev/dlock/internal/redact"
)

// Network faults, applied through in-process TCP proxies (toxiproxy as a
// library) between each worker and the store, and between each worker and
// the resource.
const (
	FaultLatency   = "latency"    // the holder's replies from the store are late by TTL/4, for 2 TTL
	FaultDrop      = "drop"       // the holder's replies never arrive, for 1.5 TTL; then its connections are reset
	FaultCut       = "cut"        // the holder's link to the store is cut (connections closed, new ones refused) for 2 TTL
	FaultSlowWrite = "slow-write" // the holder's write reaches the resource 1.5 TTL late while its link to the store is cut: the lock moves on meanwhile
)

// netFaults are a worker's proxies.
type netFaults struct {
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	store   map[int][]*toxiproxy.Proxy // by worker: one per store address
	res     map[int]*toxiproxy.Proxy   // by worker: to the resource
	stopped bool
}

// netFaultSchemes say why a scheme cannot take network faults.
var netFaultSchemes = map[string]string{
	"sqlite":         "SQLite is a local file: there is no link to the store to fault",
	"mem":            "mem:// is in the worker's own process: there is no link to fault",
	"redis+cluster":  "Redis Cluster redirects clients to the addresses its nodes announce (MOVED), past any proxy",
	"rediss+cluster": "Redis Cluster redirects clients to the addresses its nodes announce (MOVED), past any proxy",
	"redis+sentinel": "Sentinel hands clients the master's own address, past any proxy",
}

func newNetFaults() *netFaults {
	return &netFaults{
		srv:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		store: map[int][]*toxiproxy.Proxy{},
		res:   map[int]*toxiproxy.Proxy{},
	}
}

// canFault says whether rawURL's store can be put behind a proxy.
func canFault(rawURL string) error {
	scheme, _, _ := strings.Cut(rawURL, "://")
	if why, ok := netFaultSchemes[scheme]; ok {
		return fmt.Errorf("network faults cannot be applied to %s: %s", scheme, why)
	}
	if _, _, _, err := splitHosts(rawURL); err != nil {
		return err
	}
	return nil
}

// splitHosts cuts scheme://[user@]h1:p1,h2:p2/rest into its parts.
func splitHosts(rawURL string) (head string, hosts []string, tail string, err error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "", nil, "", fmt.Errorf("network faults need a URL with a host: %q", redact.String(rawURL))
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	head = scheme + "://"
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		head += authority[:i+1]
		authority = authority[i+1:]
	}
	for _, h := range strings.Split(authority, ",") {
		if !strings.Contains(h, ":") {
			return "", nil, "", fmt.Errorf("network faults need every address with its port (%q has none)", h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 || hosts[0] == "" {
		return "", nil, "", fmt.Errorf("network faults need a URL with a host: %q", redact.String(rawURL))
	}
	return head, hosts, tail, nil
}

// forWorker starts the proxies of worker id and returns the store URL and
// resource address the worker is to use.
func (n *netFaults) forWorker(id int, rawURL, resource string) (string, string, error) {
	head, hosts, tail, err := splitHosts(rawURL)
	if err != nil {
		return "", "", err
	}
	var proxies []*toxiproxy.Proxy
	var addrs []string
	for i, h := range append(hosts, resource) {
		p := toxiproxy.NewProxy(n.srv, fmt.Sprintf("w%d-%d", id, i), "127.0.0.1:0", h)
		if err := p.Start(); err != nil {
			for _, q := range proxies {
				q.Stop()
			}
			return "", "", fmt.Errorf("starting a proxy to %s: %w", h, err)
		}
		proxies = append(proxies, p)
		addrs = append(addrs, p.Listen)
	}
	n.mu.Lock()
	n.store[id] = proxies[:len(hosts)]
	n.res[id] = proxies[len(hosts)]
	n.mu.Unlock()
	return head + strings.Join(addrs[:len(hosts)], ",") + tail, addrs[len(hosts)], nil
}

// apply injects fault kind on worker id's links for about the fault's
// window and returns when it is over.
func (n *netFaults) apply(id int, kind string, ttl time.Duration) error {
	n.mu.Lock()
	store, res := n.store[id], n.res[id]
	n.mu.Unlock()
	if store == nil {
		return errors.New("no proxies for this worker")
	}
	switch kind {
	case FaultLatency:
		return withToxic(store, fmt.Sprintf(`{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, (ttl/4).Milliseconds()), 2*ttl, false)
	case FaultDrop:
		return withToxic(store, `{"name":"f","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`, ttl*3/2, true)
	case FaultSlowWrite:
		// The toxic first: the holder's write may be on its way already.
		toxic := fmt.Sprintf(`{"name":"f","type":"latency","stream":"upstream","attributes":{"latency":%d}}`, (ttl * 3 / 2).Milliseconds())
		if _, err := res.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return err
		}
		for _, p := range store {
			p.Stop()
		}
		time.Sleep(2 * ttl)
		res.Toxics.ResetToxics(context.Background())
		return restart(store)
	case FaultCut:
		for _, p := range store {
			p.Stop()
		}
		time.Sleep(2 * ttl)
		return restart(store)
	}
	return fmt.Errorf("unknown network fault %q", kind)
}

// withToxic adds the toxic to every proxy for d, then removes it; reset
// closes the connections afterwards (a reply that was swallowed leaves a
// connection out of step with its protocol).
func withToxic(ps []*toxiproxy.Proxy, toxic string, d time.Duration, reset bool) error {
	for _, p := range ps {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return err
		}
	}
	time.Sleep(d)
	if reset {
		for _, p := range ps {
			p.Stop()
		}
	}
	for _, p := range ps {
		p.Toxics.ResetToxics(context.Background())
	}
	if reset {
		return restart(ps)
	}
	return nil
}

// restart starts stopped proxies again on their own ports.
func restart(ps []*toxiproxy.Proxy) error {
	var errs []error
	for _, p := range ps {
		if err := p.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close stops every proxy.
func (n *netFaults) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ps := range n.store {
		for _, p := range ps {
			p.Stop()
		}
	}
	for _, p := range n.res {
		p.Stop()
	}
	n.stopped = true
}

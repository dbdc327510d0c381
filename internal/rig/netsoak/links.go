package netsoak

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Links puts a Toxiproxy proxy between each client and each broker it
// reaches: a client dials the broker's real address and its dialer takes
// it to that client's own proxy, so a fault on one client's links leaves
// every other client alone. Every proxy listens on 127.0.0.1.
type Links struct {
	srv     *toxiproxy.ApiServer
	brokers []string

	mu      sync.Mutex
	proxies map[string]map[string]*toxiproxy.Proxy // client → broker address → proxy
	toxicN  int
}

// NewLinks prepares proxies towards the given broker addresses.
func NewLinks(brokers []string) *Links {
	return &Links{
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		brokers: brokers,
		proxies: make(map[string]map[string]*toxiproxy.Proxy),
	}
}

// Add starts the proxies of one client and returns the dialer its Kafka
// client must use (kgo.Dialer).
func (l *Links) Add(client string) (func(ctx context.Context, network, host string) (net.Conn, error), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.proxies[client]; ok {
		return nil, fmt.Errorf("netsoak: links of %q already added", client)
	}
	ps := make(map[string]*toxiproxy.Proxy)
	for _, b := range l.brokers {
		p := toxiproxy.NewProxy(l.srv, client+"->"+b, "127.0.0.1:0", b)
		if err := p.Start(); err != nil {
			for _, q := range ps {
				q.Stop()
			}
			return nil, fmt.Errorf("netsoak: proxy %s: %w", p.Name, err)
		}
		ps[b] = p
	}
	l.proxies[client] = ps
	var d net.Dialer
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		if p, ok := ps[host]; ok {
			host = p.Listen
		}
		return d.DialContext(ctx, network, host)
	}, nil
}

// Toxic adds a toxic to every link of client and returns a function that
// removes it. kind is a Toxiproxy toxic type (latency, bandwidth,
// reset_peer, timeout, ...), stream "upstream" (client to broker) or
// "downstream", attrs its attributes as JSON.
func (l *Links) Toxic(client, kind, stream, attrs string) (remove func(), err error) {
	l.mu.Lock()
	ps := l.proxies[client]
	l.toxicN++
	name := fmt.Sprintf("%s-%s-%d", kind, stream, l.toxicN)
	l.mu.Unlock()
	if ps == nil {
		return nil, fmt.Errorf("netsoak: no links for %q", client)
	}
	var added []*toxiproxy.Proxy
	remove = func() {
		for _, p := range added {
			_ = p.Toxics.RemoveToxic(context.Background(), name)
		}
	}
	for _, b := range l.brokers {
		p := ps[b]
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attrs)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			remove()
			return nil, fmt.Errorf("netsoak: toxic %s on %s: %w", kind, p.Name, err)
		}
		added = append(added, p)
	}
	return remove, nil
}

// Close stops every proxy and closes its connections.
func (l *Links) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ps := range l.proxies {
		for _, p := range ps {
			p.Stop()
		}
	}
	l.proxies = nil
}

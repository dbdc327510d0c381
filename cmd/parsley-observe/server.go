package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
)

// listener is the bound HTTP listener and, with --http-tls-cert, its TLS
// configuration.
type listener struct {
	net.Listener
	tls *tls.Config
}

// URL is where the server answers.
func (l *listener) URL() string {
	scheme := "http"
	if l.tls != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s/", scheme, l.Addr())
}

// listen checks the HTTP TLS flags and binds --listen. Errors exit 2
// naming the flag.
func listen(c *cli.Context) (*listener, error) {
	var tc *tls.Config
	certFile, keyFile := c.String("http-tls-cert"), c.String("http-tls-key")
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		return nil, cli.Exit(fmt.Sprintf("--http-tls-cert: missing: --http-tls-key %s is set", keyFile), 2)
	case keyFile == "":
		return nil, cli.Exit(fmt.Sprintf("--http-tls-key: missing: --http-tls-cert %s is set", certFile), 2)
	default:
		r := &certReloader{certFile: certFile, keyFile: keyFile}
		if _, err := r.load(); err != nil {
			return nil, cli.Exit(fmt.Sprintf("--http-tls-cert %s with --http-tls-key %s: %v", certFile, keyFile, err), 2)
		}
		tc = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	}
	addr := c.String("listen")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("--listen %s: %v", addr, err), 2)
	}
	return &listener{Listener: ln, tls: tc}, nil
}

// certReloader serves the certificate in its files, loading them again
// when either file's modification time changes (a renewal by cert-manager
// or certbot) and keeping the last good pair while a renewal is half
// written.
type certReloader struct {
	certFile, keyFile string

	mu     sync.Mutex
	cert   *tls.Certificate
	stamps [2]time.Time
}

func (r *certReloader) stat() ([2]time.Time, error) {
	var out [2]time.Time
	for i, p := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

func (r *certReloader) load() (*tls.Certificate, error) {
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cert, r.stamps = &cert, stamps
	r.mu.Unlock()
	return &cert, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	cert, stamps := r.cert, r.stamps
	r.mu.Unlock()
	if now, err := r.stat(); err == nil && now != stamps {
		if fresh, err := r.load(); err == nil {
			return fresh, nil
		}
	}
	return cert, nil
}

// registerProcessMetrics adds the Go runtime, process and build-info
// families that Prometheus users expect from any Go service.
func registerProcessMetrics(reg *prometheus.Registry) {
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
}

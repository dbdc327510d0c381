// Package kafkasec turns client security settings — TLS and SASL, as
// parsley-observe takes them from flags, environment variables and its
// config file — into franz-go client options.
//
// It is internal: a program that builds a stage.Config, a bridge.Config or
// an observer.Config passes franz-go's own options (kgo.DialTLSConfig,
// kgo.SASL with the plugins under github.com/twmb/franz-go/pkg/sasl) in
// ClientOpts, as docs/operations.md shows; this package only gives the
// command one tested place that reads files and checks combinations.
//
// Files are read when Opts is called, so a missing or malformed file fails
// at start-up, and read again when they are needed later: the client
// certificate and key at each TLS handshake, the SASL password file and the
// OAUTHBEARER token file at each authentication. A rotated credential (a
// renewed certificate, a refreshed token) is picked up by the next
// connection without a restart.
package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ErrInvalid is wrapped by every error Opts returns.
var ErrInvalid = errors.New("invalid client security setting")

// SASL mechanisms Config.Mechanism accepts (case-insensitive).
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
)

// Mechanisms lists the accepted SASL mechanisms.
var Mechanisms = []string{Plain, ScramSHA256, ScramSHA512, OAuthBearer}

// Config holds the settings. The names in SettingError are the
// parsley-observe flag names given beside each field.
type Config struct {
	TLS                bool   // tls: connect with TLS (implied by any other tls-* setting)
	CAFile             string // tls-ca: PEM CA bundle to verify brokers with (default: the system roots)
	CertFile, KeyFile  string // tls-cert, tls-key: PEM client certificate and key, for mutual TLS
	ServerName         string // tls-server-name: name to verify brokers' certificates against (default: each broker's host)
	InsecureSkipVerify bool   // tls-insecure-skip-verify: do not verify brokers' certificates (tests only)

	Mechanism    string // sasl-mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER
	User         string // sasl-user: PLAIN and SCRAM
	Password     string // sasl-password: PLAIN and SCRAM
	PasswordFile string // sasl-password-file: PLAIN and SCRAM, instead of sasl-password
	TokenFile    string // sasl-token-file: OAUTHBEARER; the file holds the token
}

// SettingError is a setting that is missing, malformed or contradicted by
// another. It wraps ErrInvalid and the cause.
type SettingError struct {
	Setting string // the flag name, e.g. "tls-ca"
	Err     error
}

func (e *SettingError) Error() string   { return e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() []error { return []error{ErrInvalid, e.Err} }

func invalid(setting, format string, args ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, args...)}
}

// TLSEnabled reports whether c asks for TLS.
func (c Config) TLSEnabled() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Opts checks c and returns the client options it asks for: none for the
// zero Config. Every error is a *SettingError.
func (c Config) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLSEnabled() {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	mech, err := c.mechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	// franz-go sets ServerName to each broker's host when it is empty.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, &SettingError{Setting: "tls-ca", Err: err}
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, invalid("tls-ca", "%s holds no PEM certificate", c.CAFile)
		}
	}
	switch {
	case c.CertFile == "" && c.KeyFile == "":
	case c.CertFile == "":
		return nil, invalid("tls-cert", "missing: tls-key %s is set, and a client key needs its certificate", c.KeyFile)
	case c.KeyFile == "":
		return nil, invalid("tls-key", "missing: tls-cert %s is set, and a client certificate needs its key", c.CertFile)
	default:
		kp := &keyPair{certFile: c.CertFile, keyFile: c.KeyFile}
		if _, err := kp.load(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = kp.get
	}
	return tc, nil
}

// keyPair reloads a client certificate at each handshake and keeps the
// last good one, so a half-written renewal does not break connections.
type keyPair struct {
	certFile, keyFile string

	mu   sync.Mutex
	last *tls.Certificate
}

func (k *keyPair) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return nil, invalid("tls-cert", "%s with tls-key %s: %w", k.certFile, k.keyFile, err)
	}
	k.mu.Lock()
	k.last = &cert
	k.mu.Unlock()
	return &cert, nil
}

func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := k.load()
	if err == nil {
		return cert, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last != nil {
		return k.last, nil
	}
	return nil, err
}

func (c Config) mechanism() (sasl.Mechanism, error) {
	mech := strings.ToUpper(strings.TrimSpace(c.Mechanism))
	if mech == "" {
		for _, s := range []struct{ name, v string }{{"sasl-user", c.User}, {"sasl-password", c.Password}, {"sasl-password-file", c.PasswordFile}, {"sasl-token-file", c.TokenFile}} {
			if s.v != "" {
				return nil, invalid("sasl-mechanism", "missing: %s is set; want one of %s", s.name, strings.Join(Mechanisms, ", "))
			}
		}
		return nil, nil
	}
	if mech == OAuthBearer {
		for _, s := range []struct{ name, v string }{{"sasl-user", c.User}, {"sasl-password", c.Password}, {"sasl-password-file", c.PasswordFile}} {
			if s.v != "" {
				return nil, invalid(s.name, "not used by OAUTHBEARER, which reads sasl-token-file")
			}
		}
		if c.TokenFile == "" {
			return nil, invalid("sasl-token-file", "missing: OAUTHBEARER needs a token file")
		}
		token := secretFile{setting: "sasl-token-file", path: c.TokenFile}
		if _, err := token.read(); err != nil {
			return nil, err
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			t, err := token.read()
			return oauth.Auth{Token: t}, err
		}), nil
	}
	switch mech {
	case Plain, ScramSHA256, ScramSHA512:
	default:
		return nil, invalid("sasl-mechanism", "%q: want one of %s", c.Mechanism, strings.Join(Mechanisms, ", "))
	}
	if c.TokenFile != "" {
		return nil, invalid("sasl-token-file", "used by OAUTHBEARER only, not %s", mech)
	}
	if c.User == "" {
		return nil, invalid("sasl-user", "missing: %s needs a user", mech)
	}
	var password func() (string, error)
	switch {
	case c.Password != "" && c.PasswordFile != "":
		return nil, invalid("sasl-password", "set with sasl-password-file; give one")
	case c.Password != "":
		password = func() (string, error) { return c.Password, nil }
	case c.PasswordFile != "":
		f := secretFile{setting: "sasl-password-file", path: c.PasswordFile}
		if _, err := f.read(); err != nil {
			return nil, err
		}
		password = f.read
	default:
		return nil, invalid("sasl-password", "missing: %s needs sasl-password or sasl-password-file", mech)
	}
	if mech == Plain {
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := password()
			return plain.Auth{User: c.User, Pass: p}, err
		}), nil
	}
	auth := func(context.Context) (scram.Auth, error) {
		p, err := password()
		return scram.Auth{User: c.User, Pass: p}, err
	}
	if mech == ScramSHA256 {
		return scram.Sha256(auth), nil
	}
	return scram.Sha512(auth), nil
}

// secretFile is a password or token kept in a file, one value with
// optional trailing newline, as Kubernetes secrets and systemd
// credentials are mounted.
type secretFile struct{ setting, path string }

func (f secretFile) read() (string, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", &SettingError{Setting: f.setting, Err: err}
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", invalid(f.setting, "%s is empty", f.path)
	}
	return s, nil
}

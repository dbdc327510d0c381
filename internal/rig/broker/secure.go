package broker

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// EnvSecure names the environment variable that points tests at the
// SASL_SSL listener of the real cluster: the path of a JSON file the
// launcher (internal/rig/testkafka/cmd/testkafka -sasl-ssl) writes, in the form
// of testkafka.Secure.
const EnvSecure = "PARSLEY_TEST_SECURE"

// SecureListener is the SASL_SSL listener of the real test cluster: TLS
// with a required client certificate, and SASL users per mechanism.
type SecureListener struct {
	Addrs      []string `json:"addrs"`
	CA         string   `json:"ca"`
	ClientCert string   `json:"client_cert"`
	ClientKey  string   `json:"client_key"`
	Users      map[string]struct {
		Name     string `json:"name"`
		Password string `json:"password"`
	} `json:"users"`
	TokenFile string `json:"token_file"`
}

// Secure returns the SASL_SSL listener described by EnvSecure. It skips t
// when the variable is unset (kfake, or a real cluster started without
// -sasl-ssl) and stops it if the file does not describe a listener. The
// listener belongs to the cluster New leases: call New first.
func Secure(t interface {
	Skipper
	Fatal(args ...any)
}) *SecureListener {
	t.Helper()
	path := os.Getenv(EnvSecure)
	if path == "" {
		t.Skip("needs the real cluster's SASL_SSL listener: run under internal/rig/testkafka/cmd/testkafka -sasl-ssl")
	}
	s, err := readSecure(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readSecure(path string) (*SecureListener, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker: %s: %w", EnvSecure, err)
	}
	var s SecureListener
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("broker: %s %s: %w", EnvSecure, path, err)
	}
	if len(s.Addrs) == 0 || s.CA == "" || s.ClientCert == "" || s.ClientKey == "" || len(s.Users) == 0 {
		return nil, fmt.Errorf("broker: %s %s: want addrs, ca, client_cert, client_key and users", EnvSecure, path)
	}
	return &s, nil
}

// TLSConfig is a client TLS configuration for the listener: its authority
// as the only root, the client certificate presented.
func (s *SecureListener) TLSConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(s.CA)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, errors.New("broker: no certificate in " + s.CA)
	}
	cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("broker: client key pair: %w", err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

package kafkasec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testcert"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOptsRefusesBadSettings: each bad setting or combination is a
// *SettingError naming the flag at fault, wrapping ErrInvalid.
func TestOptsRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	certs, err := testcert.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	notPEM := writeFile(t, "ca.txt", "not a certificate\n")
	empty := writeFile(t, "empty", "\n")
	pw := writeFile(t, "pw", "secret\n")
	missing := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		name    string
		cfg     Config
		setting string
	}{
		{"missing CA", Config{CAFile: missing}, "tls-ca"},
		{"CA not PEM", Config{CAFile: notPEM}, "tls-ca"},
		{"cert without key", Config{CertFile: certs.ClientCert}, "tls-key"},
		{"key without cert", Config{KeyFile: certs.ClientKey}, "tls-cert"},
		{"cert with the wrong key", Config{CertFile: certs.ClientCert, KeyFile: certs.ServerKey}, "tls-cert"},
		{"unknown mechanism", Config{Mechanism: "GSSAPI", User: "u", Password: "p"}, "sasl-mechanism"},
		{"user without mechanism", Config{User: "u"}, "sasl-mechanism"},
		{"token without mechanism", Config{TokenFile: pw}, "sasl-mechanism"},
		{"PLAIN without user", Config{Mechanism: "PLAIN", Password: "p"}, "sasl-user"},
		{"SCRAM without password", Config{Mechanism: "SCRAM-SHA-512", User: "u"}, "sasl-password"},
		{"both passwords", Config{Mechanism: "SCRAM-SHA-256", User: "u", Password: "p", PasswordFile: pw}, "sasl-password"},
		{"missing password file", Config{Mechanism: "PLAIN", User: "u", PasswordFile: missing}, "sasl-password-file"},
		{"empty password file", Config{Mechanism: "PLAIN", User: "u", PasswordFile: empty}, "sasl-password-file"},
		{"token file with SCRAM", Config{Mechanism: "SCRAM-SHA-256", User: "u", Password: "p", TokenFile: pw}, "sasl-token-file"},
		{"OAUTHBEARER without token", Config{Mechanism: "OAUTHBEARER"}, "sasl-token-file"},
		{"OAUTHBEARER with a user", Config{Mechanism: "OAUTHBEARER", User: "u", TokenFile: pw}, "sasl-user"},
		{"empty token file", Config{Mechanism: "oauthbearer", TokenFile: empty}, "sasl-token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.cfg.Opts()
			var se *SettingError
			if !errors.As(err, &se) || se.Setting != tc.setting || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Opts() = %d opts, %v; want a *SettingError for %s wrapping ErrInvalid", len(opts), err, tc.setting)
			}
		})
	}
	if opts, err := (Config{}).Opts(); err != nil || len(opts) != 0 {
		t.Errorf("zero Config: %d opts, %v; want none", len(opts), err)
	}
}

// secureCluster starts kfake with TLS that requires a client certificate
// signed by the test authority, and SASL users for each mechanism kfake
// has.
func secureCluster(t *testing.T) (testcert.Files, []string) {
	t.Helper()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := certs.ServerConfig(true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(tc), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "pass256"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "pass512"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return certs, c.ListenAddrs()
}

func ping(cfg Config, seeds []string) error {
	opts, err := cfg.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// TestOptsConnectThroughTLSAndSASL: the options authenticate for real,
// by mutual TLS and each SASL mechanism, and a wrong secret or a missing
// client certificate is refused by the broker.
func TestOptsConnectThroughTLSAndSASL(t *testing.T) {
	certs, seeds := secureCluster(t)
	tlsOnly := Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	with := func(mech, user, pass string) Config {
		c := tlsOnly
		c.Mechanism, c.User, c.Password = mech, user, pass
		return c
	}
	pwFile := writeFile(t, "pw", "pass512\n")
	fromFile := with("scram-sha-512", "scram512", "")
	fromFile.PasswordFile = pwFile
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"PLAIN", with("PLAIN", "plain-user", "plain-pass"), true},
		{"SCRAM-SHA-256", with("SCRAM-SHA-256", "scram256", "pass256"), true},
		{"SCRAM-SHA-512", with("SCRAM-SHA-512", "scram512", "pass512"), true},
		{"SCRAM-SHA-512 from a password file", fromFile, true},
		{"wrong password", with("SCRAM-SHA-512", "scram512", "nope"), false},
		{"wrong mechanism for the user", with("SCRAM-SHA-256", "scram512", "pass512"), false},
		{"no SASL", tlsOnly, false},
		{"no client certificate", Config{CAFile: certs.CA, Mechanism: "PLAIN", User: "plain-user", Password: "plain-pass"}, false},
		{"no CA", Config{TLS: true, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, Mechanism: "PLAIN", User: "plain-user", Password: "plain-pass"}, false},
		{"skip verify", Config{InsecureSkipVerify: true, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, Mechanism: "PLAIN", User: "plain-user", Password: "plain-pass"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ping(tc.cfg, seeds)
			if tc.ok && err != nil {
				t.Fatalf("ping: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("ping succeeded; want the broker to refuse it")
			}
		})
	}
}

// TestPasswordFileIsReadAtEachAuthentication: a rotated password file is
// used by the next connection without new options.
func TestPasswordFileIsReadAtEachAuthentication(t *testing.T) {
	certs, seeds := secureCluster(t)
	pw := writeFile(t, "pw", "pass256")
	cfg := Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, Mechanism: "SCRAM-SHA-256", User: "scram256", PasswordFile: pw}
	opts, err := cfg.Opts()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pw, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err == nil {
		t.Fatal("ping with the rewritten (wrong) password succeeded: the file was not read again")
	}
}

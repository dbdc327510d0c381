package testkafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Secure describes the SASL_SSL listener a cluster started with
// Config.SASLSSL serves beside its plaintext one: where it is, the files a
// client verifies and authenticates with, and a user for each mechanism.
// The JSON form is what the launcher hands tests (EnvSecure).
type Secure struct {
	Addrs []string `json:"addrs"`
	// CA is the PEM certificate of the authority that signed the brokers'
	// and the client's certificates.
	CA string `json:"ca"`
	// ClientCert and ClientKey are a PEM client certificate and key: the
	// listener requires one (mutual TLS) besides SASL.
	ClientCert string `json:"client_cert"`
	ClientKey  string `json:"client_key"`
	// Users maps a SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
	// to a user and password it accepts.
	Users map[string]User `json:"users"`
	// TokenFile holds an OAUTHBEARER token the brokers' unsecured
	// validator accepts (an unsigned JWT for subject "parsley").
	TokenFile string `json:"token_file"`
}

// User is a SASL user and its password.
type User struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// EnvSecure names the environment variable the launcher sets, for a
// cluster started with -sasl-ssl, to the path of Secure as JSON.
const EnvSecure = "PARSLEY_TEST_SECURE"

// Secure returns the SASL_SSL listener's description, or nil if the
// cluster was started without Config.SASLSSL.
func (c *Cluster) Secure() *Secure { return c.secure }

// WriteFile writes s as JSON to path.
func (s *Secure) WriteFile(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// secureFiles are what makeSecure leaves in the cluster's directory.
type secureFiles struct {
	dir                  string
	storePass            string
	keystore, truststore string
	plainPassword        string
}

// keytool runs the JDK's keytool beside the configured java.
func (c *Cluster) keytool(ctx context.Context, args ...string) error {
	bin := "keytool"
	if java, err := exec.LookPath(c.cfg.Java); err == nil {
		if real, err := filepath.EvalSymlinks(java); err == nil {
			if kt := filepath.Join(filepath.Dir(real), "keytool"); fileExists(kt) {
				bin = kt
			}
		}
	}
	// keytool's own JVM: small and quick to start.
	cmd := exec.CommandContext(ctx, bin, append([]string{"-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-J-Xmx64m"}, args...)...)
	setProcAttrs(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testkafka: keytool %s: %w\n%s", args[0], err, out)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func randomSecret() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// makeSecure creates, with keytool, a certificate authority, the brokers'
// PKCS12 keystore (a key pair for 127.0.0.1 and localhost signed by the
// authority) and truststore, and a client certificate whose key is made
// here and whose signing request keytool signs; it also writes the
// OAUTHBEARER token. The authority and keys live only in the cluster's
// directory and go with it.
func (c *Cluster) makeSecure(ctx context.Context) (*secureFiles, *Secure, error) {
	dir := filepath.Join(c.root, "secure")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("testkafka: %w", err)
	}
	f := &secureFiles{dir: dir, storePass: randomSecret(), keystore: filepath.Join(dir, "broker.p12"),
		truststore: filepath.Join(dir, "truststore.p12"), plainPassword: randomSecret()}
	s := &Secure{CA: filepath.Join(dir, "ca.pem"), ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		TokenFile: filepath.Join(dir, "oauth.token"), Users: map[string]User{
			"PLAIN":         {Name: "parsley-plain", Password: f.plainPassword},
			"SCRAM-SHA-256": {Name: "parsley-scram256", Password: randomSecret()},
			"SCRAM-SHA-512": {Name: "parsley-scram512", Password: randomSecret()},
		}}
	ca := filepath.Join(dir, "ca.p12")
	store := func(path string) []string {
		return []string{"-keystore", path, "-storetype", "PKCS12", "-storepass", f.storePass}
	}
	ec := []string{"-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2"}
	steps := [][]string{
		append(append([]string{"-genkeypair", "-alias", "ca", "-dname", "CN=parsley testkafka CA", "-ext", "bc:c"}, ec...), store(ca)...),
		append([]string{"-exportcert", "-alias", "ca", "-rfc", "-file", s.CA}, store(ca)...),
		append(append([]string{"-genkeypair", "-alias", "broker", "-dname", "CN=localhost"}, ec...), store(f.keystore)...),
		append([]string{"-certreq", "-alias", "broker", "-file", filepath.Join(dir, "broker.csr")}, store(f.keystore)...),
		append([]string{"-gencert", "-alias", "ca", "-rfc", "-validity", "2", "-infile", filepath.Join(dir, "broker.csr"), "-outfile", filepath.Join(dir, "broker.pem"),
			"-ext", "SAN=ip:127.0.0.1,dns:localhost", "-ext", "EKU=serverAuth"}, store(ca)...),
		append([]string{"-importcert", "-noprompt", "-alias", "ca", "-file", s.CA}, store(f.keystore)...),
		append([]string{"-importcert", "-noprompt", "-alias", "broker", "-file", filepath.Join(dir, "broker.pem")}, store(f.keystore)...),
		append([]string{"-importcert", "-noprompt", "-alias", "ca", "-file", s.CA}, store(f.truststore)...),
	}
	for _, args := range steps {
		if err := c.keytool(ctx, args...); err != nil {
			return nil, nil, err
		}
	}
	csr := filepath.Join(dir, "client.csr")
	if err := writeClientCSR(csr, s.ClientKey); err != nil {
		return nil, nil, err
	}
	if err := c.keytool(ctx, append([]string{"-gencert", "-alias", "ca", "-rfc", "-validity", "2", "-infile", csr, "-outfile", s.ClientCert,
		"-ext", "EKU=clientAuth"}, store(ca)...)...); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(s.TokenFile, []byte(unsecuredJWT("parsley", time.Now())+"\n"), 0o600); err != nil {
		return nil, nil, fmt.Errorf("testkafka: %w", err)
	}
	return f, s, nil
}

// writeClientCSR makes the client's key pair and a signing request for it.
func writeClientCSR(csrPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("testkafka: client key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "parsley-client"}}, key)
	if err != nil {
		return fmt.Errorf("testkafka: client CSR: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("testkafka: client key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("testkafka: %w", err)
	}
	if err := os.WriteFile(csrPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("testkafka: %w", err)
	}
	return nil
}

// unsecuredJWT is a token for Kafka's default OAUTHBEARER validator,
// which accepts unsigned tokens (alg "none") for development clusters.
func unsecuredJWT(sub string, now time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "none"})
	claims, _ := json.Marshal(map[string]any{"sub": sub, "iat": now.Unix(), "exp": now.Add(48 * time.Hour).Unix()})
	return enc(header) + "." + enc(claims) + "."
}

// secureProperties are the broker settings of the SASL_SSL listener.
func (c *Cluster) secureProperties() [][2]string {
	f := c.secureFiles
	pfx := "listener.name.sasl_ssl."
	jaas := func(module, opts string) string {
		return "org.apache.kafka.common.security." + module + " required" + opts + ";"
	}
	plain := c.secure.Users["PLAIN"]
	return [][2]string{
		{"sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"},
		{pfx + "plain.sasl.jaas.config", jaas("plain.PlainLoginModule", fmt.Sprintf(` user_%s="%s"`, plain.Name, plain.Password))},
		{pfx + "scram-sha-256.sasl.jaas.config", jaas("scram.ScramLoginModule", "")},
		{pfx + "scram-sha-512.sasl.jaas.config", jaas("scram.ScramLoginModule", "")},
		{pfx + "oauthbearer.sasl.jaas.config", jaas("oauthbearer.OAuthBearerLoginModule", ` unsecuredLoginStringClaim_sub="broker"`)},
		{pfx + "ssl.keystore.location", f.keystore},
		{pfx + "ssl.keystore.type", "PKCS12"},
		{pfx + "ssl.keystore.password", f.storePass},
		{pfx + "ssl.key.password", f.storePass},
		{pfx + "ssl.truststore.location", f.truststore},
		{pfx + "ssl.truststore.type", "PKCS12"},
		{pfx + "ssl.truststore.password", f.storePass},
		{pfx + "ssl.client.auth", "required"},
	}
}

// addSCRAMUsers creates the SCRAM users through the admin API on the
// plaintext listener, then waits until each authenticates on the SASL_SSL
// listener: brokers learn of new credentials from the metadata log a
// moment after the controller answers.
func (c *Cluster) addSCRAMUsers(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		return fmt.Errorf("testkafka: %w", err)
	}
	defer cl.Close()
	var ups []kadm.UpsertSCRAM
	for mech, m := range map[string]kadm.ScramMechanism{"SCRAM-SHA-256": kadm.ScramSha256, "SCRAM-SHA-512": kadm.ScramSha512} {
		u := c.secure.Users[mech]
		ups = append(ups, kadm.UpsertSCRAM{User: u.Name, Mechanism: m, Iterations: 4096, Password: u.Password})
	}
	resps, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, ups)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("testkafka: create SCRAM users: %w", err)
	}
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		if err := c.waitSecure(ctx, mech); err != nil {
			return err
		}
	}
	return nil
}

// waitSecure polls the SASL_SSL listener of every node until the user of
// mech authenticates.
func (c *Cluster) waitSecure(ctx context.Context, mech string) error {
	tc, err := c.secure.TLSConfig()
	if err != nil {
		return err
	}
	u := c.secure.Users[mech]
	auth := scram.Auth{User: u.Name, Pass: u.Password}
	m := auth.AsSha256Mechanism()
	if mech == "SCRAM-SHA-512" {
		m = auth.AsSha512Mechanism()
	}
	for _, addr := range c.secure.Addrs {
		var last error
		for {
			last = pingOnce(ctx, addr, kgo.DialTLSConfig(tc), kgo.SASL(m))
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("testkafka: %s user on SASL_SSL listener %s: %w (last error: %v)", mech, addr, ctx.Err(), last)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func pingOnce(ctx context.Context, addr string, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return cl.Ping(pctx)
}

// TLSConfig returns a client TLS configuration for the listener: the
// authority as the only root, the client certificate presented.
func (s *Secure) TLSConfig() (*tls.Config, error) {
	pemCA, err := os.ReadFile(s.CA)
	if err != nil {
		return nil, fmt.Errorf("testkafka: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemCA) {
		return nil, errors.New("testkafka: no certificate in " + s.CA)
	}
	cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("testkafka: client key pair: %w", err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// listenerList joins listener specs for server.properties.
func listenerList(specs ...string) string { return strings.Join(specs, ",") }

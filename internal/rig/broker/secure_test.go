package broker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/testkafka"
)

// TestReadSecureReadsTheLaunchersFile: the file the launcher writes is the
// one Secure reads, field by field; an incomplete one is refused.
func TestReadSecureReadsTheLaunchersFile(t *testing.T) {
	dir := t.TempDir()
	in := &testkafka.Secure{Addrs: []string{"127.0.0.1:1"}, CA: "/ca", ClientCert: "/c", ClientKey: "/k", TokenFile: "/t",
		Users: map[string]testkafka.User{"SCRAM-SHA-512": {Name: "u", Password: "p"}}}
	path := filepath.Join(dir, "secure.json")
	if err := in.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	s, err := broker.ReadSecure(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addrs[0] != "127.0.0.1:1" || s.CA != "/ca" || s.ClientCert != "/c" || s.ClientKey != "/k" || s.TokenFile != "/t" ||
		s.Users["SCRAM-SHA-512"].Name != "u" || s.Users["SCRAM-SHA-512"].Password != "p" {
		t.Errorf("read %+v from %+v", s, in)
	}
	if err := os.WriteFile(path, []byte(`{"addrs":["x:1"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.ReadSecure(path); err == nil {
		t.Error("an incomplete description was accepted")
	}
}

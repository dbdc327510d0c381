package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestBridgeThroughSASLSSL: a bridge whose only way to Kafka is the real
// cluster's SASL_SSL listener (mutual TLS, SCRAM-SHA-512), configured with
// ClientOpts as docs/operations.md shows, forwards every record once, in
// order.
func TestBridgeThroughSASLSSL(t *testing.T) {
	s := broker.Secure(t)
	e := newEnv(t, 1, "events")
	var want []string
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, rec("events", 0, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
		want = append(want, fmt.Sprintf("events/0@%d", i))
	}
	e.produce(recs...)
	tc, err := s.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	u := s.Users["SCRAM-SHA-512"]
	cfg := e.config("events")
	cfg.Brokers = s.Addrs
	cfg.ClientOpts = []kgo.Opt{
		kgo.DialTLSConfig(tc),
		kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism()),
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 60*time.Second, "5 messages", func() bool { return len(e.streamMsgs(testStream)) >= 5 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
}

package stage_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestStageThroughSASLSSL: a stage whose only way to Kafka is the real
// cluster's SASL_SSL listener (mutual TLS, SCRAM-SHA-512), configured with
// ClientOpts as docs/operations.md shows, consumes, emits and commits
// exactly once: the records it copies arrive once each, in order.
func TestStageThroughSASLSSL(t *testing.T) {
	s := broker.Secure(t)
	in := stage.NewTopic("in", stage.String(), stage.String())
	out := stage.NewTopic("out", stage.String(), stage.String())
	st := stage.On(stage.Named("copy"), in, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{out.Send(m.Key, "copied "+m.Value)}, nil
	}).Into(out).MustBuild()
	compact := "compact"
	c := broker.New(t, broker.Topics(broker.Topic{Name: "in"}, broker.Topic{Name: "out"},
		broker.Topic{Name: stage.ChangelogTopic("secure", "copy"), Configs: map[string]*string{"cleanup.policy": &compact}}))
	tc, err := s.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	u := s.Users["SCRAM-SHA-512"]
	app, err := stage.New(stage.Config{
		ApplicationID: "secure", InstanceID: "i1", Brokers: s.Addrs, StateDir: filepath.Join(t.TempDir(), "state"),
		SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second, TransactionTimeout: 5 * time.Second,
		ClientOpts: []kgo.Opt{
			kgo.DialTLSConfig(tc),
			kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism()),
		},
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var want []string
	for i := range 3 {
		if err := c.Client().ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("copied v%d", i))
	}
	rd, err := c.NewClient(kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	for len(got) < len(want) {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %q of %q before the timeout", got, want)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if !slices.Equal(got, want) {
		t.Fatalf("out holds %q, want %q", got, want)
	}
}

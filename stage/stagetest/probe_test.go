package stagetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/stage/stagetest"
)

func appOf(t *testing.T, stages ...*stage.Stage) *stage.App {
	t.Helper()
	a, err := stage.New(stage.Config{ApplicationID: "shop", InstanceID: "probe", Brokers: []string{"unused:9092"}, StateDir: t.TempDir()}, stages...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var (
	payments = stage.NewTopic("payments", stage.String(), stage.Int64())
	receipts = stage.NewTopic("receipts", stage.String(), stage.String())
	stray    = stage.NewTopic("stray", stage.String(), stage.String())
)

func receiptStage(h stage.Handler[string, int64], sink *stage.Topic[string, string]) *stage.Stage {
	return stage.On(stage.Named("receipts"), payments, h).
		Ticks(time.Minute, func(tk stage.Tick) ([]stage.Emission, error) {
			return []stage.Emission{sink.Send("tick", tk.Time.UTC().Format(time.RFC3339))}, nil
		}).Into(sink).MustBuild()
}

func goodHandler(sink *stage.Topic[string, string]) stage.Handler[string, int64] {
	return func(m stage.Message[string, int64]) ([]stage.Emission, error) {
		return []stage.Emission{sink.Send(m.Key, fmt.Sprint(m.Value))}, nil
	}
}

// TestProbeCatchesBrokenApplications: each probe flags an application
// broken in its way, and a correct application passes with its notes.
func TestProbeCatchesBrokenApplications(t *testing.T) {
	var n atomic.Int64
	drifting := stage.NewTopic("payments", stage.Of(
		func(s string) ([]byte, error) { return []byte(fmt.Sprintf("%s#%d", s, n.Add(1))), nil },
		func(b []byte) (string, error) { return strings.Split(string(b), "#")[0], nil }), stage.Int64())
	undecodable := stage.NewTopic("receipts", stage.String(), stage.Of(
		func(s string) ([]byte, error) { return []byte(s), nil },
		func([]byte) (string, error) { return "", errors.New("not my format") }))

	for _, tc := range []struct {
		name    string
		stage   *stage.Stage
		samples []stagetest.Sample
		probe   string // the probe that must fail; "" for none
		detail  string
	}{
		{"correct", receiptStage(goodHandler(receipts), receipts), []stagetest.Sample{stagetest.SampleOf(payments, "p1", 5)}, "", ""},
		{"key-codec", stage.On(stage.Named("receipts"), drifting, goodHandler(receipts)).Into(receipts).MustBuild(),
			[]stagetest.Sample{stagetest.SampleOf(drifting, "p1", 5)}, stagetest.ProbeKeyCodec, "encoding the same key twice"},
		{"sink-decode", receiptStage(goodHandler(undecodable), undecodable), []stagetest.Sample{stagetest.SampleOf(payments, "p1", 5)},
			stagetest.ProbeSinkDecode, "not my format"},
		{"declared-sinks", receiptStage(goodHandler(stray), receipts), []stagetest.Sample{stagetest.SampleOf(payments, "p1", 5)},
			stagetest.ProbeDeclaredSinks, `"stray"`},
		{"logic", receiptStage(func(m stage.Message[string, int64]) ([]stage.Emission, error) {
			if m.Value > 3 {
				return nil, errors.New("amount too large")
			}
			return nil, nil
		}, receipts), []stagetest.Sample{stagetest.SampleOf(payments, "p1", 5)}, stagetest.ProbeLogic, "amount too large"},
		{"samples", receiptStage(goodHandler(receipts), receipts), []stagetest.Sample{stagetest.SampleOf(stray, "s", "x")},
			stagetest.ProbeSamples, `"stray"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := stagetest.Probe(t, appOf(t, tc.stage), tc.samples...)
			if tc.probe == "" {
				if !r.OK() {
					t.Fatalf("a correct application failed: %v", r.Err())
				}
				if len(r.Noted(stagetest.ProbeNames)) != 1 || len(r.Noted(stagetest.ProbeTickTopic)) != 1 ||
					!strings.Contains(r.Noted(stagetest.ProbeTickTopic)[0].Detail, "shop-receipts-ticks") {
					t.Fatalf("notes %v; want the pinned names and the tick topic to create", r.Notes)
				}
				return
			}
			fs := r.Failed(tc.probe)
			if len(fs) == 0 || !strings.Contains(fs[0].Detail, tc.detail) {
				t.Fatalf("probe %s: failures %v, want one mentioning %s", tc.probe, r.Failures, tc.detail)
			}
			if r.Err() == nil || !strings.Contains(r.Err().Error(), tc.probe) {
				t.Fatalf("Err() = %v", r.Err())
			}
		})
	}
}

// TestProbeCluster: the cluster probes flag a missing topic, sources that
// disagree on partition count and a tick topic of the wrong width, and pass
// a correct cluster.
func TestProbeCluster(t *testing.T) {
	c := broker.New(t, broker.Topics(
		broker.Topic{Name: "payments", Partitions: 2}, broker.Topic{Name: "receipts", Partitions: 2},
		broker.Topic{Name: "shop-receipts-changelog", Partitions: 2}, broker.Topic{Name: "shop-receipts-ticks", Partitions: 1},
		broker.Topic{Name: "refunds", Partitions: 3},
	))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refunds := stage.NewTopic("refunds", stage.String(), stage.Int64())
	h := func(m stage.Message[string, int64]) ([]stage.Emission, error) { return nil, nil }
	twoSources := stage.On(stage.On(stage.Named("receipts"), payments, h), refunds, h).
		Ticks(time.Minute, func(stage.Tick) ([]stage.Emission, error) { return nil, nil }).Into(receipts).MustBuild()
	r, err := stagetest.ProbeCluster(ctx, appOf(t, twoSources), c.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if fs := r.Failed(stagetest.ProbeCoPartition); len(fs) == 0 || !strings.Contains(fs[0].Detail, "2: payments; 3: refunds") {
		t.Errorf("co-partition: %v", r.Failures)
	}
	if fs := r.Failed(stagetest.ProbeTickTopic); len(fs) != 1 || !strings.Contains(fs[0].Detail, `"shop-receipts-ticks" has 1 partitions, its widest source 3`) {
		t.Errorf("tick-topic: %v", r.Failures)
	}
	missing := stage.On(stage.Named("audit"), payments, h).Into(stage.NewTopic("audits", stage.String(), stage.String())).MustBuild()
	r, err = stagetest.ProbeCluster(ctx, appOf(t, missing), c.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if fs := r.Failed(stagetest.ProbeTopicExists); len(fs) != 2 || !strings.Contains(fs[0].Detail, `"audits"`) || !strings.Contains(fs[1].Detail, `"shop-audit-changelog"`) {
		t.Errorf("topic-exists: %v", r.Failures)
	}
	if err := c.CreateTopics(ctx, broker.Topic{Name: "audits", Partitions: 2}, broker.Topic{Name: "shop-audit-changelog", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	r, err = stagetest.ProbeCluster(ctx, appOf(t, missing), c.Admin())
	if err != nil || !r.OK() {
		t.Fatalf("a correct cluster: %v %v", err, r.Err())
	}
}

package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

func produceN(e *env, topic string, partitions int32, from, n int) []string {
	var recs []*kgo.Record
	var want []string
	next := make(map[int32]int)
	for i := from; i < from+n; i++ {
		p := int32(i) % partitions
		recs = append(recs, rec(topic, p, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
		next[p]++
	}
	e.produce(recs...)
	for i := from; i < from+n; i++ {
		p := int32(i) % partitions
		want = append(want, fmt.Sprintf("%s/%d@%d", topic, p, i/int(partitions)))
	}
	return want
}

// TestKilledBetweenAckAndCommitLeavesEachRecordOnce: the bridge stops
// after JetStream acknowledged a step's publishes and before Kafka
// committed it — the window a crash can hit. The restarted bridge
// republishes that step; JetStream absorbs the repeats by Nats-Msg-Id and
// the stream holds every record exactly once, in order.
func TestKilledBetweenAckAndCommitLeavesEachRecordOnce(t *testing.T) {
	killedBetweenAckAndCommit(t, AtomicBatch)
}

// TestKilledBetweenAckAndCommitFastBatch is
// TestKilledBetweenAckAndCommitLeavesEachRecordOnce in FastBatch mode.
func TestKilledBetweenAckAndCommitFastBatch(t *testing.T) {
	killedBetweenAckAndCommit(t, FastBatch)
}

func killedBetweenAckAndCommit(t *testing.T, mode PublishMode) {
	e := newEnv(t, 2, "events")
	want := produceN(e, "events", 2, 0, 60)
	cfg := e.config("events")
	if mode == FastBatch {
		cfg = e.fastConfig("events")
	}
	cfg.MaxPollRecords = 10
	cfg.MaxInFlight = 8
	b1, h1 := newHooked(t, cfg)
	var cancel1 context.CancelFunc
	started := make(chan struct{}) // cancel1 is set
	killed, killedStep := false, 0
	h1.after = func() error {
		if !killed && testutil.ToFloat64(b1.pub.m.published) >= 25 {
			killed, killedStep = true, len(h1.step)
			<-started
			cancel1()
			return errors.New("killed between publish acknowledgement and Kafka commit")
		}
		return nil
	}
	r1 := e.start(b1)
	cancel1 = r1.cancel
	close(started)
	select {
	case <-r1.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the first bridge did not stop")
	}
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	if !killed {
		t.Fatal("the kill hook never fired")
	}
	if killedStep <= cfg.MaxPollRecords {
		t.Fatalf("killed in a step of %d records, one poll's worth (%d): not inside a step spanning polls", killedStep, cfg.MaxPollRecords)
	}
	published1 := testutil.ToFloat64(b1.pub.m.published)
	uncommitted := len(e.streamMsgs(testStream))
	t.Logf("first run: %d publishes acknowledged, %d committed steps, killed in a step of %d records", int(published1), b1.CommittedSteps(), killedStep)

	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r2 := e.start(b2)
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	// The second bridge republishes every record the first did not
	// commit: the killed step's and any after it. The stream may hold
	// them all already (the killed step may be the whole input).
	redo := len(want) - (int(published1) - killedStep)
	waitFor(t, 30*time.Second, "the second bridge to republish what the first did not commit", func() bool {
		return testutil.ToFloat64(b2.pub.m.published) >= float64(redo)
	})
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	if mode == FastBatch {
		// The stream absorbs duplicates in a fast batch without saying so:
		// the restarted bridge had more records acknowledged than were
		// missing from the stream.
		missing := float64(len(want) - uncommitted)
		waitFor(t, 10*time.Second, "the restarted bridge to republish stored records", func() bool {
			return testutil.ToFloat64(b2.pub.m.published) > missing
		})
		if b2.pub.fastMode() == nil {
			t.Fatal("the test did not run in FastBatch mode")
		}
	} else if d := testutil.ToFloat64(b2.pub.m.duplicates); d == 0 {
		t.Fatal("the restarted bridge republished nothing: the test did not hit the ack-to-commit window")
	}
	if v := testutil.ToFloat64(b2.pub.m.orderViolations); v != 0 {
		t.Fatalf("%v order violations reported on a stream whose order is right", v)
	}
	t.Logf("restart absorbed %v duplicates", testutil.ToFloat64(b2.pub.m.duplicates))
}

// TestNATSRestartLosesNothing: the NATS server goes away mid-run and
// comes back on the same port and store. The bridge blocks and retries;
// the stream ends with every record once, in order.
func TestNATSRestartLosesNothing(t *testing.T) {
	natsRestart(t, AtomicBatch)
}

// TestNATSRestartFastBatch is TestNATSRestartLosesNothing in FastBatch
// mode.
func TestNATSRestartFastBatch(t *testing.T) {
	natsRestart(t, FastBatch)
}

func natsRestart(t *testing.T, mode PublishMode) {
	e := newEnv(t, 2, "events")
	want := produceN(e, "events", 2, 0, 100)
	cfg := e.config("events")
	if mode == FastBatch {
		cfg = e.fastConfig("events")
	}
	cfg.MaxPollRecords = 10
	cfg.MaxInFlight = 4
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 30*time.Second, "some records forwarded", func() bool { return testutil.ToFloat64(b.pub.m.published) >= 20 })
	e.stopNATS()
	want = append(want, produceN(e, "events", 2, 100, 100)...)
	waitFor(t, 30*time.Second, "a failed step", func() bool { return testutil.ToFloat64(b.pub.m.retries) >= 2 })
	e.startNATS()
	waitFor(t, 60*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	if v := testutil.ToFloat64(b.pub.m.orderViolations); v != 0 {
		t.Fatalf("%v order violations reported on a stream whose order is right", v)
	}
	if (b.pub.fastMode() != nil) != (mode == FastBatch) {
		t.Fatalf("publisher in FastBatch mode: %v, configured %v", (b.pub.fastMode() != nil), mode)
	}
	t.Logf("retries %v, failures %v, duplicates %v", testutil.ToFloat64(b.pub.m.retries), testutil.ToFloat64(b.pub.m.failures), testutil.ToFloat64(b.pub.m.duplicates))
}

// TestCorruptStampStopsTheBridge: a record whose vc header does not decode
// stops the bridge with an error naming its coordinate, and nothing is
// published for it or after it.
func TestCorruptStampStopsTheBridge(t *testing.T) {
	e := newEnv(t, 1, "events")
	bad := rec("events", 0, "k1", "bad")
	bad.Headers = []kgo.RecordHeader{{Key: headers.HeaderVC, Value: []byte{0xde, 0xad}}}
	e.produce(rec("events", 0, "k0", "good"), bad, rec("events", 0, "k2", "after"))
	b, err := New(e.config("events"))
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not stop on a corrupt stamp")
	}
	if !errors.Is(r.err, headers.ErrUndecodable) {
		t.Fatalf("Run = %v, want headers.ErrUndecodable", r.err)
	}
	var se *stage.StepError
	if !errors.As(r.err, &se) || se.Topic != "events" || se.Partition != 0 || se.Offset != 1 {
		t.Fatalf("Run = %v, want a StepError at events[0]@1", r.err)
	}
	for _, m := range e.streamMsgs(testStream) {
		if m.coord != "events/0@0" {
			t.Fatalf("published %s (%q) despite the corrupt stamp at events/0@1", m.coord, m.data)
		}
	}
}

// TestStartupRefusals: a stream whose duplicate window is shorter than
// the horizon, a mapping to a subject no stream captures, a mapping to a
// subject another stream captures, and a missing stream are refused
// before anything is consumed.
func TestStartupRefusals(t *testing.T) {
	e := newEnv(t, 2, "events")
	e.createStream(jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short.>"}, Duplicates: 10 * time.Second, AllowAtomicPublish: true})
	e.createStream(jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}, Duplicates: 5 * time.Minute, AllowAtomicPublish: true})
	e.createStream(jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}, Duplicates: 5 * time.Minute})
	mapTo := func(tmpl string) SubjectFunc {
		f, err := Template(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	onlyP0 := func(topic string, p int32, _ []byte) (string, error) {
		if p == 0 {
			return "kafka.x", nil
		}
		return "nowhere.x", nil
	}
	for _, tc := range []struct {
		name    string
		stream  string
		subject SubjectFunc
		horizon time.Duration
		want    error
		mode    PublishMode
	}{
		{"short duplicate window", "SHORT", mapTo("short.{partition}"), time.Minute, ErrDuplicateWindow, AtomicBatch},
		{"subject in no stream", testStream, mapTo("elsewhere.{topic}"), 0, ErrNoStream, AtomicBatch},
		{"subject in another stream", testStream, mapTo("other.{topic}"), 0, ErrNoStream, AtomicBatch},
		{"one partition in no stream", testStream, onlyP0, 0, ErrNoStream, AtomicBatch},
		{"missing stream", "NOPE", mapTo("kafka.{topic}"), 0, ErrNoStream, AtomicBatch},
		{"stream without atomic publish", "PLAIN", mapTo("plain.{topic}"), 0, ErrAtomicPublish, AtomicBatch},
		// The test stream allows atomic publish, not batched publish.
		{"stream without batched publish", testStream, mapTo("kafka.{topic}"), 0, ErrFastBatch, FastBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config("events")
			cfg.Stream, cfg.Subject, cfg.RedeliveryHorizon, cfg.Publish = tc.stream, tc.subject, tc.horizon, tc.mode
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := Run(ctx, cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			if tc.want == ErrFastBatch && !strings.Contains(err.Error(), "allow_batched") {
				t.Fatalf("Run = %v, does not say how to allow fast batches", err)
			}
			t.Log(err)
		})
	}
	// A group whose changelog topic does not exist: the stage runtime's
	// topology check names it.
	cfg := e.config("events")
	cfg.ApplicationID = "nochangelog"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Run(ctx, cfg); !errors.Is(err, stage.ErrTopology) || !strings.Contains(err.Error(), ChangelogTopic("nochangelog", "bridge")) {
		t.Fatalf("Run without a changelog = %v, want stage.ErrTopology naming it", err)
	}
	// Control: the same env runs with a good configuration.
	cfg = e.config("events")
	cfg.Stream, cfg.Subject, cfg.RedeliveryHorizon = "SHORT", mapTo("short.{partition}"), 10*time.Second
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 20*time.Second, "the bridge to become ready", b.Ready)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitsForNATSAtStartup: NATS is down when the bridge starts; the
// bridge logs that NATS is unreachable at its URL, waits, retrying, and
// forwards everything once NATS is up.
func TestWaitsForNATSAtStartup(t *testing.T) {
	e := newEnv(t, 1, "events")
	want := produceN(e, "events", 1, 0, 10)
	e.stopNATS()
	cfg := e.config("events")
	var logs logBuffer
	cfg.Logger = logs.logger()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 10*time.Second, "the bridge to log that NATS is unreachable", func() bool {
		return strings.Contains(logs.String(), "NATS unreachable")
	})
	select {
	case <-r.done:
		t.Fatalf("Run returned %v while NATS was down", r.err)
	default:
	}
	if l := logs.String(); !strings.Contains(l, e.natsURL()) || strings.Contains(l, "outbound buffer") {
		t.Fatalf("log does not name the URL %s, or names a buffer:\n%s", e.natsURL(), l)
	}
	e.startNATS()
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
}

// TestSubjectCheckWaitsOutNATS: NATS drops after the stream check and
// before the subject check; the subject check waits for NATS instead of
// failing the bridge, then passes.
func TestSubjectCheckWaitsOutNATS(t *testing.T) {
	e := newEnv(t, 2, "events")
	cfg := e.config("events")
	var logs logBuffer
	cfg.Logger = logs.logger()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := connect(b.cfg.SinkConfig, &publisher{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.stopNATS()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.checkSubjects(ctx, js, []string{"kafka.>"}) }()
	waitFor(t, 30*time.Second, "the subject check to report NATS unreachable", func() bool {
		return strings.Contains(logs.String(), "NATS unreachable")
	})
	select {
	case err := <-done:
		t.Fatalf("checkSubjects returned %v while NATS was down", err)
	default:
	}
	e.startNATS()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("checkSubjects = %v after NATS came back", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("checkSubjects still waiting 30s after NATS came back")
	}
	if ctx.Err() != nil {
		t.Fatal("the check ended with its context, not with NATS back")
	}
}

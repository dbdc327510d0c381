package stagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The probes, by the name a Finding carries.
const (
	ProbeKeyCodec      = "key-codec"      // key codecs deterministic and canonical on samples and outputs
	ProbeStamps        = "stamps"         // every sink record carries parseable vc, vc-sender, vc-seq headers
	ProbeSinkDecode    = "sink-decode"    // every output decodes with its sink topic's codecs
	ProbeDeclaredSinks = "declared-sinks" // no handler path emits to an undeclared sink
	ProbeLogic         = "logic"          // handlers and folds are total on the samples
	ProbeSamples       = "samples"        // every sample names a topic some stage consumes
	ProbeTopicExists   = "topic-exists"   // every source, sink, changelog and tick topic exists (cluster)
	ProbeCoPartition   = "co-partition"   // a stage's sources agree on partition count (cluster)
	ProbeTickTopic     = "tick-topic"     // a tick topic has its widest source's partition count (cluster)
	ProbeNames         = "names"          // the names each stage pins (notes)
)

// Finding is one result of a probe: what it observed and the contract
// clause it checks.
type Finding struct {
	Probe  string
	Detail string
	Clause string
}

func (f Finding) String() string {
	return fmt.Sprintf("[%s] %s (clause: %s)", f.Probe, f.Detail, f.Clause)
}

// Report is the outcome of Probe or ProbeCluster. Failures are violations;
// notes are blind spots and reminders (a source without a sample, a sink
// no sample reached, the topics to create, the names to keep stable). A
// report with notes and no failures passed.
type Report struct {
	Failures []Finding
	Notes    []Finding
}

// OK reports whether no probe failed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// Err returns every failure joined in one error, or nil.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "stagetest: %d contract probe failure(s):", len(r.Failures))
	for _, f := range r.Failures {
		b.WriteString("\n  " + f.String())
	}
	return errors.New(b.String())
}

// AssertOK fails the test with every failure at once.
func (r *Report) AssertOK(t TB) {
	t.Helper()
	if err := r.Err(); err != nil {
		t.Fatalf("%v", err)
	}
}

// Failed returns the failures of one probe.
func (r *Report) Failed(probe string) []Finding { return filter(r.Failures, probe) }

// Noted returns the notes of one probe.
func (r *Report) Noted(probe string) []Finding { return filter(r.Notes, probe) }

func filter(fs []Finding, probe string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Probe == probe {
			out = append(out, f)
		}
	}
	return out
}

func (r *Report) fail(probe, clause, format string, args ...any) {
	r.Failures = append(r.Failures, Finding{Probe: probe, Detail: fmt.Sprintf(format, args...), Clause: clause})
}

func (r *Report) note(probe, clause, format string, args ...any) {
	r.Notes = append(r.Notes, Finding{Probe: probe, Detail: fmt.Sprintf(format, args...), Clause: clause})
}

// Sample is a record to feed an application under Probe. Make one with
// SampleOf.
type Sample struct {
	topic  string
	encode func() (key, value []byte, err error)
	check  func() error // key codec deterministic and canonical on the sample
}

// SampleOf returns a sample record (k, v) for topic.
func SampleOf[K, V any](topic *stage.Topic[K, V], k K, v V) Sample {
	enc := func() ([]byte, []byte, error) {
		kb, err := topic.KeyCodec().Encode(k)
		if err != nil {
			return nil, nil, fmt.Errorf("encode key: %w", err)
		}
		vb, err := topic.ValueCodec().Encode(v)
		if err != nil {
			return nil, nil, fmt.Errorf("encode value: %w", err)
		}
		return nonNil(kb), nonNil(vb), nil
	}
	check := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("key codec panicked: %v", r)
			}
		}()
		a, err := topic.KeyCodec().Encode(k)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		b, err := topic.KeyCodec().Encode(k)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("encoding the same key twice gave %q and %q", a, b)
		}
		back, err := topic.KeyCodec().Decode(a)
		if err != nil {
			return fmt.Errorf("decode of its own encoding %q: %w", a, err)
		}
		c, err := topic.KeyCodec().Encode(back)
		if err != nil {
			return fmt.Errorf("re-encode: %w", err)
		}
		if !bytes.Equal(a, c) {
			return fmt.Errorf("decode then encode of %q gave %q", a, c)
		}
		return nil
	}
	return Sample{topic: topic.Name(), encode: enc, check: check}
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Probe runs the application's stages under a Driver (an in-process
// broker; nothing of app's Config but its ID is used), feeds every sample,
// advances the wall clock past the widest tick interval so ticking stages
// tick, and checks what comes out: the key-codec, stamps, sink-decode,
// declared-sinks, logic and samples probes, with notes for sources without
// a sample, sinks nothing reached, the tick topics to create, and the names
// each stage pins. A failing step stops the run (the first failure is
// reported; fix it and probe again).
func Probe(t TB, app *stage.App, samples ...Sample) *Report {
	t.Helper()
	r := &Report{}
	stages := app.Stages()
	consumed := map[string]int{} // topic -> stages consuming it
	for _, s := range stages {
		for _, n := range s.Sources() {
			consumed[n]++
		}
	}
	sampled := map[string]bool{}
	var feed []Sample
	for _, s := range samples {
		if consumed[s.topic] == 0 {
			r.fail(ProbeSamples, "stage.New: a sample must name a topic some stage consumes",
				"sample on %q, which no stage consumes; the probe run would not exercise it", s.topic)
			continue
		}
		sampled[s.topic] = true
		if err := s.check(); err != nil {
			r.fail(ProbeKeyCodec, "stage.Codec: a key codec is deterministic and canonical",
				"sample key on %q: %v", s.topic, err)
		}
		feed = append(feed, s)
	}
	for _, s := range stages {
		for _, n := range s.Sources() {
			if !sampled[n] {
				r.note(ProbeSamples, "stage.Named: every source should be exercised",
					"stage %q: source %q has no sample; its handler path went unexercised", s.Name(), n)
			}
		}
	}
	nameNotes(r, app)

	d, err := start(t, stages, ApplicationID(app.ApplicationID()))
	if err != nil {
		r.fail(ProbeLogic, "stage.Handler", "the application did not start under the driver: %v", err)
		return r
	}
	defer d.close()
	var want float64 // deliveries the samples and ticks make at least
	for _, s := range feed {
		want += float64(consumed[s.topic])
		k, v, err := s.encode()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), d.opts.timeout)
			err = d.prod.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: k, Value: v}).FirstErr()
			cancel()
		}
		if err != nil {
			r.fail(ProbeLogic, "stage.Codec", "sample on %q could not be sent: %v", s.topic, err)
		}
	}
	var widest time.Duration
	for _, s := range stages {
		widest = max(widest, s.TickInterval())
	}
	if widest > 0 {
		_ = d.advance(widest) // a failure shows as the run's error below
	}
	d.settle(want + d.wantTks)
	if err := d.Err(); err != nil {
		classify(r, err)
	}

	reached := map[string]bool{}
	for _, s := range stages {
		for _, sk := range s.SinkTopics() {
			name := sinkName(sk)
			if reached[name] {
				continue
			}
			rs, _ := d.read(name, -1, 200*time.Millisecond)
			reached[name] = len(rs) > 0
			checkOutputs(r, sk, name, rs)
			if len(rs) == 0 {
				r.note(ProbeSinkDecode, "stage.Builder.Into", "stage %q: no sample reached sink %q; its outputs went unchecked", s.Name(), name)
			}
		}
	}
	return r
}

// settle waits until at least want records were delivered and the
// application stopped delivering: the delivered count unchanged over
// several polls and nothing held. It gives up when the application stops
// or the driver's timeout passes.
func (d *Driver) settle(want float64) {
	last, same := -1.0, 0
	deadline := time.Now().Add(d.opts.timeout)
	for (same < 10 || last < want) && time.Now().Before(deadline) && d.Err() == nil {
		time.Sleep(30 * time.Millisecond)
		n, held := d.gauges()
		if n == last && held == 0 {
			same++
		} else {
			same, last = 0, n
		}
	}
}

func (d *Driver) gauges() (delivered, held float64) {
	fams, err := d.reg.Gather()
	if err != nil {
		return -1, -1
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "parsley_records_delivered_total":
				delivered += m.GetCounter().GetValue()
			case "parsley_records_held":
				held += m.GetGauge().GetValue()
			}
		}
	}
	return delivered, held
}

// classify turns the error a probe run stopped with into a finding.
func classify(r *Report, err error) {
	var se *stage.StepError
	switch {
	case errors.Is(err, stage.ErrUndeclaredSink):
		r.fail(ProbeDeclaredSinks, "stage.Handler: emit only to declared sinks", "%v", err)
	case errors.As(err, &se):
		r.fail(ProbeLogic, "stage.Handler: handlers and folds are total on real data", "%v", err)
	default:
		r.fail(ProbeLogic, "stage.Handler", "the application stopped: %v", err)
	}
}

type recordChecker interface {
	CheckRecord(key, value []byte) error
}

func sinkName(s stage.Sink) string {
	if n, ok := s.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprint(s)
}

// checkOutputs runs the stamps, sink-decode and key-codec probes over the
// records observed on one sink.
func checkOutputs(r *Report, sk stage.Sink, name string, rs []*kgo.Record) {
	var st headers.Stamp
	for _, rec := range rs {
		at := fmt.Sprintf("%s[%d]@%d", name, rec.Partition, rec.Offset)
		if err := checkStamp(&st, rec.Headers); err != nil {
			r.fail(ProbeStamps, "clock.Stamp: every causal record carries its stamp", "%s: %v", at, err)
		}
		c, ok := sk.(recordChecker)
		if !ok {
			continue
		}
		if err := c.CheckRecord(rec.Key, rec.Value); err != nil {
			probe := ProbeSinkDecode
			if ce := (*stage.CodecError)(nil); errors.As(err, &ce) && ce.Op == "re-encode" {
				probe = ProbeKeyCodec
			}
			r.fail(probe, "stage.Codec: Decode accepts what Encode produces", "%s: %v", at, err)
		}
	}
}

// checkStamp requires the vc, vc-sender and vc-seq headers, each once,
// and that they decode.
func checkStamp(st *headers.Stamp, hs []kgo.RecordHeader) error {
	have := map[string]int{}
	for _, h := range hs {
		have[h.Key]++
	}
	var missing []string
	for _, k := range []string{headers.HeaderVC, headers.HeaderVCSender, headers.HeaderVCSeq} {
		if have[k] == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing stamp headers %q", missing)
	}
	return headers.ReadStamp(st, hs)
}

// nameNotes notes the names each stage pins and the tick topics to create.
func nameNotes(r *Report, app *stage.App) {
	for _, s := range app.Stages() {
		r.note(ProbeNames, "stage.Named and Config.ApplicationID stay stable across deployments",
			"stage %q in application %q pins changelog %q and sender identities; keep both names stable",
			s.Name(), app.ApplicationID(), stage.ChangelogTopic(app.ApplicationID(), s.Name()))
		if s.TickInterval() > 0 {
			r.note(ProbeTickTopic, "stage.Builder.Ticks",
				"stage %q ticks: create %q with its widest source's partition count", s.Name(), stage.TickTopic(app.ApplicationID(), s.Name()))
		}
	}
}

// ProbeCluster asks a live cluster, read-only and without starting the
// application, what Run would fail closed on at start: every source, sink,
// changelog and tick topic exists (topic-exists), a stage's sources agree
// on partition count (co-partition), its changelog and tick topic have
// exactly that many partitions (tick-topic). It also notes the names each
// stage pins.
func ProbeCluster(ctx context.Context, app *stage.App, admin *kadm.Client) (*Report, error) {
	r := &Report{}
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	id := app.ApplicationID()
	for _, s := range app.Stages() {
		for _, n := range s.Sources() {
			add(n)
		}
		for _, n := range s.Sinks() {
			add(n)
		}
		add(stage.ChangelogTopic(id, s.Name()))
		if s.TickInterval() > 0 {
			add(stage.TickTopic(id, s.Name()))
		}
	}
	// Asking for authorized operations bypasses the client's metadata
	// cache: a deploy check wants the cluster's answer now.
	md, err := admin.Metadata(kadm.WithAuthorizedOps(ctx), names...)
	if err != nil {
		return nil, fmt.Errorf("stagetest: metadata: %w", err)
	}
	parts := map[string]int{}
	for _, n := range names {
		td, ok := md.Topics[n]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			r.fail(ProbeTopicExists, "declared topics exist before the application starts", "topic %q does not exist", n)
			continue
		}
		parts[n] = len(td.Partitions)
	}
	for _, s := range app.Stages() {
		counts := map[int][]string{}
		widest := 0
		for _, n := range s.Sources() {
			if p, ok := parts[n]; ok {
				counts[p] = append(counts[p], n)
				widest = max(widest, p)
			}
		}
		if len(counts) > 1 {
			var desc []string
			for p, ts := range counts {
				desc = append(desc, fmt.Sprintf("%d: %s", p, strings.Join(ts, ",")))
			}
			sort.Strings(desc)
			r.fail(ProbeCoPartition, "a stage's sources are co-partitioned",
				"stage %q: sources have different partition counts (%s)", s.Name(), strings.Join(desc, "; "))
		}
		if cl := stage.ChangelogTopic(id, s.Name()); widest > 0 && parts[cl] > 0 && parts[cl] != widest {
			r.fail(ProbeCoPartition, "a stage's changelog has one partition per task",
				"stage %q: changelog %q has %d partitions, its sources %d", s.Name(), cl, parts[cl], widest)
		}
		if tk := stage.TickTopic(id, s.Name()); s.TickInterval() > 0 && widest > 0 && parts[tk] > 0 && parts[tk] != widest {
			r.fail(ProbeTickTopic, "stage.Builder.Ticks: the tick topic has exactly the widest source's partition count",
				"stage %q: tick topic %q has %d partitions, its widest source %d", s.Name(), tk, parts[tk], widest)
		}
	}
	nameNotes(r, app)
	return r, nil
}

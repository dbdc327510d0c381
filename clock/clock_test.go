package clock_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A sequential producer that writes A to X, then B to Y, stamps B with a
// claim covering A's offset.
func TestSequentialProducerClaimsItsOwnSends(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x", Partitions: 2}, broker.Topic{Name: "y"})
	// Put A at a non-zero offset so a claim of 0 cannot pass by accident.
	for range 3 {
		produce(t, c, &kgo.Record{Topic: "x", Partition: 1})
	}
	clk := clock.New(c.Admin())

	a := &kgo.Record{Topic: "x", Partition: 1, Value: []byte("A")}
	if err := clk.Stamp(testCtx(t), a); err != nil {
		t.Fatal(err)
	}
	a = produce(t, c, a)
	if err := clk.RecordProduced(a); err != nil {
		t.Fatal(err)
	}
	b := &kgo.Record{Topic: "y", Value: []byte("B")}
	if err := clk.Stamp(testCtx(t), b); err != nil {
		t.Fatal(err)
	}
	produce(t, c, b)

	x := topicID(t, c, "x")
	gotA := consume(t, c, "x", 1, 4)[3]
	if n := claims(t, gotA); !n.IsEmpty() {
		t.Errorf("A, the first stamped send, claims %v; want nothing", n)
	}
	gotB := consume(t, c, "y", 0, 1)[0]
	bc := claims(t, gotB)
	wantOffset(t, bc, ch(x, 1), 3)
	if bc.NumOffsets() != 1 || bc.NumSeqs() != 0 {
		t.Errorf("B claims %d offset and %d sequence entries, want exactly the one on x/1", bc.NumOffsets(), bc.NumSeqs())
	}
	if _, _, ok, err := clock.RecordSender(gotB); ok || err != nil {
		t.Errorf("a plain producer's record reads as tagged (%v) or fails (%v)", ok, err)
	}
}

// A consumer that consumed A and then produced C stamps C claiming A and
// everything A claimed; both ways of observing agree.
func TestConsumeThenProduceClaimsCauseAndItsPast(t *testing.T) {
	for _, tc := range []struct {
		name    string
		observe func(*testing.T, *clock.Clock, *kgo.Client) error
	}{
		{"Observe", func(t *testing.T, clk *clock.Clock, cl *kgo.Client) error {
			for _, r := range pollN(t, cl, 2) {
				if err := clk.Observe(r); err != nil {
					return err
				}
			}
			return nil
		}},
		{"ObserveFetches", func(t *testing.T, clk *clock.Clock, cl *kgo.Client) error {
			n := 0
			for n < 2 {
				fs := cl.PollFetches(testCtx(t))
				if err := fs.Err0(); err != nil {
					return err
				}
				n += fs.NumRecords()
				if err := clk.ObserveFetches(testCtx(t), fs); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(t, broker.Topic{Name: "w"}, broker.Topic{Name: "x"}, broker.Topic{Name: "y"})
			up := clock.New(c.Admin())
			for range 2 {
				produce(t, c, &kgo.Record{Topic: "w"})
			}
			w := produce(t, c, &kgo.Record{Topic: "w"}) // offset 2
			if err := up.RecordProduced(w); err != nil {
				t.Fatal(err)
			}
			produce(t, c, &kgo.Record{Topic: "x"}) // offset 0, unstamped
			a := &kgo.Record{Topic: "x", Value: []byte("A")}
			if err := up.Stamp(testCtx(t), a); err != nil {
				t.Fatal(err)
			}
			produce(t, c, a) // offset 1, claims w@2

			cons, err := c.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"x": {0: kgo.NewOffset().AtStart()}}))
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			down := clock.New(c.Admin())
			if err := tc.observe(t, down, cons); err != nil {
				t.Fatal(err)
			}
			cRec := &kgo.Record{Topic: "y", Value: []byte("C")}
			if err := down.Stamp(testCtx(t), cRec); err != nil {
				t.Fatal(err)
			}
			produce(t, c, cRec)

			got := claims(t, consume(t, c, "y", 0, 1)[0])
			wantOffset(t, got, ch(topicID(t, c, "x"), 0), 1)
			wantOffset(t, got, ch(topicID(t, c, "w"), 0), 2)
			if got.NumOffsets() != 2 {
				t.Errorf("C claims %d channels, want 2 (x and w)", got.NumOffsets())
			}
		})
	}
}

// Stamping in the causes dialect yields the same offset claims when read
// back, in the one parsley.causes header.
func TestCausesDialectCarriesTheSameClaims(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x", Partitions: 3}, broker.Topic{Name: "y"})
	vc := clock.New(c.Admin())
	causes := clock.New(c.Admin(), clock.Dialect(headers.DialectCauses))
	for p := int32(0); p < 3; p++ {
		for i := int32(0); i <= p; i++ {
			r := produce(t, c, &kgo.Record{Topic: "x", Partition: p})
			for _, clk := range []*clock.Clock{vc, causes} {
				if err := clk.RecordProduced(r); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, clk := range []*clock.Clock{vc, causes} {
		r := &kgo.Record{Topic: "y", Headers: []kgo.RecordHeader{{Key: "app", Value: []byte("kept")}}}
		if err := clk.Stamp(testCtx(t), r); err != nil {
			t.Fatal(err)
		}
		produce(t, c, r)
	}
	recs := consume(t, c, "y", 0, 2)
	for i, want := range []string{headers.HeaderVC, headers.HeaderCauses} {
		var keys []string
		for _, h := range recs[i].Headers {
			keys = append(keys, h.Key)
		}
		if len(keys) != 2 || keys[0] != "app" || keys[1] != want {
			t.Errorf("record %d headers %q, want [app %s]", i, keys, want)
		}
	}
	a, b := claims(t, recs[0]), claims(t, recs[1])
	if !a.Equal(b) {
		t.Fatalf("vc stamp claims %v, causes stamp %v", a, b)
	}
	x := topicID(t, c, "x")
	for p := int32(0); p < 3; p++ {
		wantOffset(t, b, ch(x, p), int64(p))
	}
}

// Stamping a record that carries a reserved header name fails with
// ErrReservedHeader and leaves the record as it was.
func TestStampRefusesReservedHeaders(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	for _, dialect := range []headers.Dialect{headers.DialectVC, headers.DialectCauses} {
		clk := clock.New(c.Admin(), clock.Dialect(dialect))
		for _, tc := range []struct {
			key      string
			reserved bool
		}{
			{"vc", true}, {"vc-sender", true}, {"vc-seq", true},
			{"parsley.causes", true}, {"parsley.anything", true}, {"parsley.", true},
			{"vcx", false}, {"parsley", false}, {"Parsley.causes", false}, {"trace-id", false},
		} {
			rec := &kgo.Record{Topic: "x", Headers: []kgo.RecordHeader{{Key: "app"}, {Key: tc.key, Value: []byte{1}}}}
			err := clk.Stamp(testCtx(t), rec)
			if !tc.reserved {
				if err != nil || len(rec.Headers) != 3 {
					t.Errorf("%v: header %q: err = %v, %d headers; want it stamped", dialect, tc.key, err, len(rec.Headers))
				}
				continue
			}
			var rh *headers.ReservedHeaderError
			if !errors.Is(err, headers.ErrReservedHeader) || !errors.As(err, &rh) || rh.Key != tc.key {
				t.Errorf("%v: header %q: err = %v, want ErrReservedHeader naming it", dialect, tc.key, err)
			}
			if len(rec.Headers) != 2 {
				t.Errorf("%v: header %q: refused record now has %d headers", dialect, tc.key, len(rec.Headers))
			}
		}
	}
}

// Stamping, observing or folding a send for a missing topic fails with an
// error naming it, and never yields the zero ID.
func TestMissingTopicIsAnErrorNamingIt(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	check := func(what string, err error) {
		t.Helper()
		var ut *clock.UnknownTopicError
		if !errors.Is(err, clock.ErrUnknownTopic) || !errors.As(err, &ut) || ut.Topic != "missing" {
			t.Errorf("%s: err = %v, want *UnknownTopicError for %q", what, err, "missing")
			return
		}
		if !strings.Contains(err.Error(), `"missing"`) {
			t.Errorf("%s: error %q does not name the topic", what, err)
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("%s: error %v does not carry the broker's UNKNOWN_TOPIC_OR_PARTITION", what, err)
		}
	}
	rec := &kgo.Record{Topic: "missing"}
	check("Stamp", clk.Stamp(testCtx(t), rec))
	if len(rec.Headers) != 0 {
		t.Error("Stamp for a missing topic attached headers")
	}
	check("Observe", clk.Observe(&kgo.Record{Topic: "missing", Offset: 4}))
	check("RecordProduced", clk.RecordProduced(&kgo.Record{Topic: "missing", Offset: 4}))
	id, err := clk.Resolver().TopicID(testCtx(t), "missing")
	check("TopicID", err)
	if !id.IsZero() {
		t.Errorf("TopicID of a missing topic returned %v alongside its error", id)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Errorf("failed folds left claims: %v", clk.Snapshot())
	}
	var ut *clock.UnknownTopicError
	if err := clk.Stamp(testCtx(t), &kgo.Record{}); !errors.As(err, &ut) || ut.Topic != "" {
		t.Errorf("Stamp with no topic: err = %v, want *UnknownTopicError", err)
	}
}

// A topic deleted and recreated under the same name is a new channel; the
// claim made on the old incarnation keeps naming it.
func TestRecreatedTopicIsANewChannel(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"}, broker.Topic{Name: "y"})
	// An admin whose client caches metadata for 10s: the resolver must not
	// be fooled by that cache.
	cl, err := c.NewClient(kgo.MetadataMinAge(10e9), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	admin := kadm.NewClient(cl)
	clk := clock.New(admin)

	old := topicID(t, c, "x")
	for range 2 {
		produce(t, c, &kgo.Record{Topic: "x"})
	}
	a := produce(t, c, &kgo.Record{Topic: "x"}) // offset 2 on the old incarnation
	if err := clk.RecordProduced(a); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Metadata(testCtx(t), "x"); err != nil { // warm the client's cache
		t.Fatal(err)
	}
	if err := c.DeleteTopics(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopics(testCtx(t), broker.Topic{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	recreated := topicID(t, c, "x")
	if recreated == old {
		t.Fatal("broker gave the recreated topic its old ID")
	}
	if cached, _ := clk.Resolver().Cached("x"); cached != old {
		t.Fatalf("resolver cached %v before refresh, want the old ID %v", cached, old)
	}
	got, err := clk.Resolver().Refresh(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if got != recreated {
		t.Fatalf("Refresh returned %v, want the new ID %v (old %v)", got, recreated, old)
	}

	// The shared producer still addresses the old ID and is refused
	// (franz-go's producer does not follow a recreation until the topic is
	// purged from the client). The promise folds nothing for the refusal,
	// and forgets the topic; the retry after the purge is acknowledged on
	// the new incarnation and folded there.
	var errs []error
	for attempt := 0; ; attempt++ {
		var b *kgo.Record
		var err error
		done := make(chan struct{})
		c.Client().Produce(testCtx(t), &kgo.Record{Topic: "x"}, clk.Promise(func(r *kgo.Record, e error) {
			b, err = r, e
			close(done)
		}))
		<-done
		if err == nil {
			if b.Offset != 0 {
				t.Fatalf("first record on the new incarnation at offset %d", b.Offset)
			}
			break
		}
		errs = append(errs, err)
		if attempt == 20 || !(errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)) {
			t.Fatalf("producing to the recreated topic: %v", errs)
		}
		if _, ok := clk.Resolver().Cached("x"); ok {
			t.Fatalf("the promise saw %v and kept the cached topic ID", err)
		}
		c.Client().PurgeTopicsFromClient("x")
	}
	snap := clk.Snapshot()
	wantOffset(t, snap, ch(old, 0), 2)
	wantOffset(t, snap, ch(recreated, 0), 0)

	out := &kgo.Record{Topic: "y"}
	if err := clk.Stamp(testCtx(t), out); err != nil {
		t.Fatal(err)
	}
	stamped := claims(t, produce(t, c, out))
	wantOffset(t, stamped, ch(old, 0), 2)
	wantOffset(t, stamped, ch(recreated, 0), 0)
}

// An expired cache entry is looked up again, straight from the brokers.
func TestResolverNoticesRecreationWhenTheCacheExpires(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	cl, err := c.NewClient(kgo.MetadataMinAge(10e9))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := clock.NewResolver(kadm.NewClient(cl), 1) // every answer expires at once
	old, err := r.TopicID(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTopics(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TopicID(testCtx(t), "x"); !errors.Is(err, clock.ErrUnknownTopic) {
		t.Fatalf("deleted topic resolved: err = %v", err)
	}
	if _, ok := r.Cached("x"); ok {
		t.Error("resolver still caches a topic the cluster says is gone")
	}
	if err := c.CreateTopics(testCtx(t), broker.Topic{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	now, err := r.TopicID(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if now == old || now != topicID(t, c, "x") {
		t.Fatalf("after recreation resolved %v; old %v, current %v", now, old, topicID(t, c, "x"))
	}
}

// A fresh cached answer is served without asking the cluster; Forget makes
// the next lookup ask.
func TestResolverCachesAnswers(t *testing.T) {
	broker.KfakeOnly(t, "counts the resolver's metadata requests through a kfake Control hook")
	c := cluster(t, broker.Topic{Name: "x"})
	r := clock.NewResolver(c.Admin(), 0)
	var mu sync.Mutex
	asked := 0
	c.Fake().ControlKey(3, func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		mu.Lock()
		asked++
		mu.Unlock()
		return nil, nil, false
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return asked }
	for range 3 {
		if _, err := r.TopicID(testCtx(t), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("three lookups sent %d metadata requests, want 1", n)
	}
	r.Forget("x")
	if _, err := r.TopicID(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("lookup after Forget: %d metadata requests in all, want 2", n)
	}
}

// A failed produce is never folded; an unknown-topic failure makes the
// resolver forget the topic; an acknowledged one is folded before the
// caller's promise runs.
func TestPromiseFoldsOnlyAcknowledgedSends(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	x := topicID(t, c, "x")
	if _, err := clk.Resolver().TopicID(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	var seen []error
	p := clk.Promise(func(_ *kgo.Record, err error) { seen = append(seen, err) })

	p(&kgo.Record{Topic: "x", Offset: 7}, kerr.NotEnoughReplicas)
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("failed produce folded: %v", clk.Snapshot())
	}
	if _, ok := clk.Resolver().Cached("x"); !ok {
		t.Error("an unrelated produce error dropped the cached topic ID")
	}
	p(&kgo.Record{Topic: "x", Offset: 7}, kerr.UnknownTopicID)
	if _, ok := clk.Resolver().Cached("x"); ok {
		t.Error("UNKNOWN_TOPIC_ID did not make the resolver forget the topic")
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("failed produce folded: %v", clk.Snapshot())
	}

	done := make(chan struct{})
	c.Client().Produce(testCtx(t), &kgo.Record{Topic: "x"}, clk.Promise(func(r *kgo.Record, err error) {
		defer close(done)
		seen = append(seen, err)
		if err != nil {
			return
		}
		if got, ok := clk.Snapshot().Offset(ch(x, 0)); !ok || got != r.Offset {
			t.Errorf("promise ran before its record was folded: claim %d (%v), record at %d", got, ok, r.Offset)
		}
	}))
	<-done
	if len(seen) != 3 || !errors.Is(seen[0], kerr.NotEnoughReplicas) || seen[2] != nil {
		t.Errorf("promise saw %v", seen)
	}
	wantOffset(t, clk.Snapshot(), ch(x, 0), 0)
}

// A present but undecodable stamp is an error and folds nothing, not even
// the record's own coordinate.
func TestObserveUndecodableFoldsNothing(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	good, err := headers.EncodeVC(new(headers.Clock))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hs   []kgo.RecordHeader
	}{
		{"garbage vc", []kgo.RecordHeader{{Key: "vc", Value: []byte{9, 9}}}},
		{"empty vc", []kgo.RecordHeader{{Key: "vc"}}},
		{"duplicate vc", []kgo.RecordHeader{{Key: "vc", Value: good}, {Key: "vc", Value: good}}},
		{"sender without seq", []kgo.RecordHeader{{Key: "vc", Value: good}, {Key: "vc-sender", Value: make([]byte, 16)}}},
		{"causes version 2", []kgo.RecordHeader{{Key: "parsley.causes", Value: []byte{2, 0}}}},
		{"empty causes", []kgo.RecordHeader{{Key: "parsley.causes"}}},
	} {
		err := clk.Observe(&kgo.Record{Topic: "x", Offset: 5, Headers: tc.hs})
		if !errors.Is(err, headers.ErrUndecodable) {
			t.Errorf("%s: err = %v, want ErrUndecodable", tc.name, err)
		} else if !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: error %q does not name the topic", tc.name, err)
		}
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("undecodable records folded: %v", clk.Snapshot())
	}
}

// Control records and impossible coordinates are refused.
func TestObserveRefusesWhatIsNoCause(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	marker := controlRecord(t, c, "x")
	if err := clk.Observe(marker); !errors.Is(err, clock.ErrControlRecord) {
		t.Errorf("control record: err = %v, want ErrControlRecord", err)
	}
	for _, r := range []*kgo.Record{{Topic: "x", Offset: -1}, {Topic: "x", Partition: -1}} {
		if err := clk.Observe(r); !errors.Is(err, clock.ErrInvalidCoordinate) {
			t.Errorf("Observe %d/%d: err = %v, want ErrInvalidCoordinate", r.Partition, r.Offset, err)
		}
		if err := clk.RecordProduced(r); !errors.Is(err, clock.ErrInvalidCoordinate) {
			t.Errorf("RecordProduced %d/%d: err = %v, want ErrInvalidCoordinate", r.Partition, r.Offset, err)
		}
	}
	if err := clk.ProducedAt(headers.Coordinate{Offset: 1}); !errors.Is(err, clock.ErrInvalidCoordinate) {
		t.Errorf("ProducedAt the zero topic: err = %v, want ErrInvalidCoordinate", err)
	}
	zero := new(headers.Clock)
	zero.SetOffset(headers.Channel{}, 4)
	vc, err := headers.EncodeVC(zero)
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.Observe(&kgo.Record{Topic: "x", Headers: []kgo.RecordHeader{{Key: "vc", Value: vc}}}); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("clock naming the zero topic: err = %v, want ErrUndecodable", err)
	}
	if err := clk.ObserveStamp(headers.Coordinate{Channel: ch(headers.TopicID{9}, 0)}, &headers.Stamp{Clock: *zero}); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("ObserveStamp of a clock naming the zero topic: err = %v, want ErrUndecodable", err)
	}
	zero.DeleteOffset(headers.Channel{})
	zero.SetOffset(ch(headers.TopicID{9}, 0), 1)
	zero.SetSeq(headers.Channel{}, headers.SenderID{1}, 2)
	if vc, err = headers.EncodeVC(zero); err != nil {
		t.Fatal(err)
	}
	if err := clk.Observe(&kgo.Record{Topic: "x", Headers: []kgo.RecordHeader{{Key: "vc", Value: vc}}}); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("sequence entry naming the zero topic: err = %v, want ErrUndecodable", err)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("refused records folded: %v", clk.Snapshot())
	}
}

// Sequence claims folded from a stage's record travel on in the vc
// dialect; the causes dialect cannot carry them and refuses rather than
// drop a cause.
func TestSequenceClaimsNeedTheVCDialect(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"}, broker.Topic{Name: "y"})
	x := topicID(t, c, "x")
	var stage headers.Stamp
	stage.Tagged, stage.Sender, stage.Seq = true, headers.SenderID{1}, 9
	stage.Clock.SetSeq(ch(x, 0), headers.SenderID{2}, 4)
	hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &stage, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	in := produce(t, c, &kgo.Record{Topic: "x", Headers: hs})
	for _, tc := range []struct {
		dialect headers.Dialect
		want    error
	}{{headers.DialectVC, nil}, {headers.DialectCauses, headers.ErrUnencodable}} {
		clk := clock.New(c.Admin(), clock.Dialect(tc.dialect))
		if err := clk.Observe(in); err != nil {
			t.Fatal(err)
		}
		out := &kgo.Record{Topic: "y"}
		err := clk.Stamp(testCtx(t), out)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%v: err = %v, want %v", tc.dialect, err, tc.want)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), `"y"`) {
				t.Errorf("%v: error %q does not name the topic", tc.dialect, err)
			}
			continue
		}
		got := claims(t, out)
		if seq, ok := got.Seq(ch(x, 0), headers.SenderID{2}); !ok || seq != 4 {
			t.Errorf("vc stamp lost the sequence claim: %v", got)
		}
		wantOffset(t, got, ch(x, 0), in.Offset)
	}
}

// Concurrent folds and stamps race-free, and every fold lands.
func TestConcurrentUse(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	const writers, folds = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	for g := range writers {
		wg.Go(func() {
			for i := range folds {
				if err := clk.ProducedAt(headers.Coordinate{Channel: ch(headers.TopicID{byte(g + 1)}, 0), Offset: int64(i)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			prev := new(headers.Clock)
			for range folds {
				r := &kgo.Record{Topic: "x"}
				if err := clk.Stamp(testCtx(t), r); err != nil {
					errs <- err
					return
				}
				var s headers.Stamp
				if err := headers.ReadStamp(&s, r.Headers); err != nil {
					errs <- err
					return
				}
				if !s.Clock.Dominates(prev) {
					errs <- fmt.Errorf("stamp %v went back from %v", &s.Clock, prev)
					return
				}
				prev = s.Clock.Clone()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	snap := clk.Snapshot()
	for g := range writers {
		wantOffset(t, snap, ch(headers.TopicID{byte(g + 1)}, 0), folds-1)
	}
}

// ObserveFetches names channels by the fetch response's topic ID, and a
// mismatch with the cached ID means the topic was recreated.
func TestObserveFetchesTrustsTheFetchedTopicID(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin())
	x := topicID(t, c, "x")
	if _, err := clk.Resolver().TopicID(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	other := headers.TopicID{0xee}
	fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{
		Topic:   "x",
		TopicID: other,
		Partitions: []kgo.FetchPartition{{Partition: 0, Records: []*kgo.Record{
			{Topic: "x", Offset: 4},
			controlRecord(t, c, "x"),
		}}},
	}}}}
	if err := clk.ObserveFetches(testCtx(t), fs); err != nil {
		t.Fatal(err)
	}
	snap := clk.Snapshot()
	wantOffset(t, snap, ch(other, 0), 4)
	if _, ok := snap.Offset(ch(x, 0)); ok || snap.NumOffsets() != 1 {
		t.Errorf("fetch from incarnation %v folded as %v", other, snap)
	}
	if _, ok := clk.Resolver().Cached("x"); ok {
		t.Error("a fetch with a different topic ID left the cached ID in place")
	}
}

// Other client libraries stamp and observe through any header type of the
// right shape.
func TestGenericHeaderHelpers(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"}, broker.Topic{Name: "y"})
	x := topicID(t, c, "x")
	clk := clock.New(c.Admin())
	if err := clk.Produced(testCtx(t), "x", 0, 6); err != nil {
		t.Fatal(err)
	}
	type libHeader struct {
		Key   string
		Value []byte
	}
	hs, err := clock.AppendStamp(testCtx(t), clk, "y", []libHeader{{Key: "app", Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[1].Key != headers.HeaderVC {
		t.Fatalf("headers %v, want app then vc", hs)
	}
	down := clock.New(c.Admin())
	if err := clock.ObserveHeaders(testCtx(t), down, "y", 0, 3, hs); err != nil {
		t.Fatal(err)
	}
	snap := down.Snapshot()
	wantOffset(t, snap, ch(x, 0), 6)
	wantOffset(t, snap, ch(topicID(t, c, "y"), 0), 3)
	if _, err := clock.AppendStamp(testCtx(t), clk, "y", []libHeader{{Key: "vc-seq"}}); !errors.Is(err, headers.ErrReservedHeader) {
		t.Errorf("reserved header through AppendStamp: err = %v", err)
	}
	if err := clock.ObserveHeaders(testCtx(t), down, "y", 0, 4, []libHeader{{Key: "vc", Value: []byte{1}}}); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("undecodable through ObserveHeaders: err = %v", err)
	}
}

func TestReadSender(t *testing.T) {
	id := headers.SenderID{0xab, 0xcd}
	seq := headers.AppendSeq(nil, 42)
	for _, tc := range []struct {
		name    string
		hs      []headers.Header
		ok      bool
		wantErr bool
	}{
		{"absent", []headers.Header{{Key: "vc", Value: []byte{1}}}, false, false},
		{"tagged", []headers.Header{{Key: "vc-seq", Value: seq}, {Key: "a"}, {Key: "vc-sender", Value: id[:]}}, true, false},
		{"sender only", []headers.Header{{Key: "vc-sender", Value: id[:]}}, false, true},
		{"seq only", []headers.Header{{Key: "vc-seq", Value: seq}}, false, true},
		{"duplicate sender", []headers.Header{{Key: "vc-sender", Value: id[:]}, {Key: "vc-sender", Value: id[:]}, {Key: "vc-seq", Value: seq}}, false, true},
		{"duplicate seq", []headers.Header{{Key: "vc-sender", Value: id[:]}, {Key: "vc-seq", Value: seq}, {Key: "vc-seq", Value: seq}}, false, true},
		{"short sender", []headers.Header{{Key: "vc-sender", Value: id[:15]}, {Key: "vc-seq", Value: seq}}, false, true},
		{"negative seq", []headers.Header{{Key: "vc-sender", Value: id[:]}, {Key: "vc-seq", Value: bytes.Repeat([]byte{0xff}, 8)}}, false, true},
	} {
		gotID, gotSeq, ok, err := clock.ReadSender(tc.hs)
		if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, headers.ErrUndecodable)) {
			t.Errorf("%s: err = %v, want error %v wrapping ErrUndecodable", tc.name, err, tc.wantErr)
		}
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && (gotID != id || gotSeq != 42) {
			t.Errorf("%s: read %v/%d, want %v/42", tc.name, gotID, gotSeq, id)
		}
	}
}

func TestReadRecordStamp(t *testing.T) {
	var s headers.Stamp
	s.Tagged, s.Sender, s.Seq = true, headers.SenderID{7}, 3
	s.Clock.SetOffset(ch(headers.TopicID{1}, 2), 10)
	hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &s, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	got, err := clock.ReadRecordStamp(&kgo.Record{Headers: hs})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Clock.Equal(&s.Clock) || !got.Tagged || got.Sender != s.Sender || got.Seq != 3 {
		t.Errorf("read %+v, want %+v", got, &s)
	}
	if _, err := clock.ReadRecordStamp(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "vc"}}}); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("empty vc: err = %v", err)
	}
}

// Records stamped between two folds share one encoding; a fold makes the
// next stamp encode anew and never rewrites a value already handed out.
func TestStampValuesAreNeverRewritten(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	x := topicID(t, c, "x")
	for _, d := range []headers.Dialect{headers.DialectVC, headers.DialectCauses} {
		clk := clock.New(c.Admin(), clock.Dialect(d))
		stamp := func() *kgo.Record {
			r := &kgo.Record{Topic: "x"}
			if err := clk.Stamp(testCtx(t), r); err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := stamp()
		before := bytes.Clone(first.Headers[0].Value)
		if err := clk.ProducedAt(headers.Coordinate{Channel: ch(x, 0), Offset: 3}); err != nil {
			t.Fatal(err)
		}
		second := stamp()
		if err := clk.ProducedAt(headers.Coordinate{Channel: ch(x, 0), Offset: 4}); err != nil {
			t.Fatal(err)
		}
		third, fourth := stamp(), stamp()
		if !bytes.Equal(first.Headers[0].Value, before) {
			t.Errorf("%v: a fold rewrote a stamp already handed out", d)
		}
		if n := claims(t, first); !n.IsEmpty() {
			t.Errorf("%v: first stamp claims %v", d, n)
		}
		wantOffset(t, claims(t, second), ch(x, 0), 3)
		wantOffset(t, claims(t, third), ch(x, 0), 4)
		if !bytes.Equal(third.Headers[0].Value, fourth.Headers[0].Value) {
			t.Errorf("%v: two stamps of an unchanged clock differ", d)
		}
	}
}

// A lookup that was already under way when the topic was forgotten does
// not bring the forgotten ID back.
func TestResolverKeepsTheNewerWord(t *testing.T) {
	broker.KfakeOnly(t, "holds a metadata request in a kfake Control hook to order it against Forget")
	c := cluster(t, broker.Topic{Name: "x"})
	r := clock.NewResolver(c.Admin(), 0)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.Fake().ControlKey(3, func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if kreq.(*kmsg.MetadataRequest).IncludeTopicAuthorizedOperations {
			// Hold the resolver's first lookup until Forget has run.
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil, nil, false
	})
	done := make(chan error)
	go func() {
		_, err := r.Refresh(testCtx(t), "x")
		done <- err
	}()
	<-entered
	r.Forget("x")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if id, ok := r.Cached("x"); ok {
		t.Fatalf("a lookup begun before Forget cached %v after it", id)
	}
	if _, err := r.Refresh(testCtx(t), "x"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Cached("x"); !ok {
		t.Fatal("a lookup begun after Forget was not cached")
	}
}

func TestUnknownDialectIsRefused(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"})
	clk := clock.New(c.Admin(), clock.Dialect(headers.Dialect(9)))
	rec := &kgo.Record{Topic: "x"}
	if err := clk.Stamp(testCtx(t), rec); !errors.Is(err, headers.ErrUnencodable) || len(rec.Headers) != 0 {
		t.Errorf("unknown dialect: err = %v, %d headers; want ErrUnencodable and none", err, len(rec.Headers))
	}
}

package observer

// A deterministic judge of sharing the topics: shards of a group run in
// one goroutine over an in-memory state topic and in-memory partitions,
// and a seed decides everything else — which shard ingests which batch,
// evaluates, publishes, reads the state topic; which channel moves where
// (a rebalance, revoked in good order); which shard is killed (what it had
// not delivered to the state topic is lost; its channels wait, then go to
// the others) and restarted over its store; and new records (sequence
// gaps, claims past the log end) arriving all along. The Kafka test
// (shard_test.go) samples the interleavings a real group happens to take;
// this one generates them.
//
// Every finding of the topology holds from the moment it is written: none
// may resolve on the way. So the judge asks, after every step, that no
// shard recorded a finding as resolved (or reopened), and at the end, once
// every channel is read and every fact delivered, that every shard lists
// exactly what one observer over the same records lists, acknowledgements
// taken before the moves included.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// simLog is a state topic in memory. Shards produce into their own
// buffers, delivered to the log in order when flushed or when the judge
// says; a shard killed loses what it had not delivered.
type simLog struct{ facts []fact }

type simProducer struct {
	log     *simLog
	pending []fact
}

func (p *simProducer) Produce(_ context.Context, key, owner string, value []byte) {
	if value != nil {
		value = slices.Clone(value)
	}
	p.pending = append(p.pending, fact{key: key, owner: owner, value: value})
}

func (p *simProducer) Flush(context.Context) error {
	p.deliver(len(p.pending))
	return nil
}

func (p *simProducer) deliver(n int) {
	p.log.facts = append(p.log.facts, p.pending[:n]...)
	p.pending = p.pending[n:]
}

// simData is the topics: every record each channel will hold, and how
// many of them are written so far.
type simData struct {
	chans    []headers.Channel
	name     map[headers.Channel]string
	recs     map[headers.Channel][]incoming
	written  map[headers.Channel]int
	parts    map[headers.TopicID]int32
	appended int
}

func simTopic(b byte) headers.TopicID { return headers.TopicID{b, 0x51, b} }

func (d *simData) add(name string, t headers.TopicID, p int32, in incoming) {
	ch := headers.Channel{Topic: t, Partition: p}
	if _, ok := d.recs[ch]; !ok {
		d.chans = append(d.chans, ch)
		d.name[ch] = name
		d.parts[t] = max(d.parts[t], p+1)
	}
	in.Channel, in.Topic = ch, name
	if n := len(d.recs[ch]); n > 0 && in.Offset == 0 {
		last := d.recs[ch][n-1]
		in.Offset = last.Offset + 1
	}
	in.Timestamp = in.Offset
	d.recs[ch] = append(d.recs[ch], in)
}

func stamped(t *testing.T, st *headers.Stamp) []headers.Header {
	t.Helper()
	hs, err := headers.AppendStamp([]headers.Header(nil), st, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// end is the offset after the last written record of ch: what a
// read_committed reader reaches.
func (d *simData) end(ch headers.Channel) int64 {
	n := d.written[ch]
	if n == 0 {
		return 0
	}
	return d.recs[ch][n-1].Offset + 1
}

func (d *simData) offsets() map[headers.Channel]ChannelOffsets {
	out := map[headers.Channel]ChannelOffsets{}
	for _, ch := range d.chans {
		e := d.end(ch)
		out[ch] = ChannelOffsets{Name: d.name[ch], Start: 0, Stable: e, End: e}
	}
	return out
}

// newSimData writes a topology of every finding whose findings, once
// written, hold: on "events" (4 partitions) stage tasks' records; on
// "ledger" (3) claims on them; on "txn" records around a commit and an
// abort, and on "claims" claims on its marker and its aborted record; on
// "retired" a retired task's records and on "carriers" (2) records still
// carrying sequence claims on them; "mixed" stamped on one partition and
// not the other; "grow" stamps widening over both partitions; "placed" a
// keyed record on the wrong partition claiming the other. append adds to
// events (a gap each time) and ledger (a claim past the log end).
func newSimData(t *testing.T) *simData {
	d := &simData{name: map[headers.Channel]string{}, recs: map[headers.Channel][]incoming{}, written: map[headers.Channel]int{},
		parts: map[headers.TopicID]int32{}}
	events, ledger, txn, claims := simTopic(1), simTopic(2), simTopic(3), simTopic(4)
	retired, carriers, mixed, grow, placed := simTopic(5), simTopic(6), simTopic(7), simTopic(8), simTopic(9)
	for p := range int32(4) {
		d.add("events", events, p, incoming{Headers: stamped(t, &headers.Stamp{Tagged: true, Sender: headers.SenderID{0xe, byte(p)}, Seq: 1})})
	}
	// A gap from the start on events/1; a claim past the log end on ledger/2.
	d.add("events", events, 1, incoming{Headers: stamped(t, &headers.Stamp{Tagged: true, Sender: headers.SenderID{0xe, 1}, Seq: 3})})
	for q := range int32(3) {
		st := &headers.Stamp{}
		st.Clock.SetOffset(headers.Channel{Topic: events, Partition: q}, 0)
		if q == 2 {
			st.Clock.SetOffset(headers.Channel{Topic: events, Partition: 3}, 10_000)
		}
		d.add("ledger", ledger, q, incoming{Headers: stamped(t, st)})
	}
	// An undecodable stamp, and a sender whose stamp goes back (txn/0@4,
	// then @0, both records).
	d.add("bad", simTopic(10), 0, incoming{Headers: []headers.Header{{Key: headers.HeaderVC, Value: []byte{9}}}})
	for i, v := range []int64{4, 0} {
		st := &headers.Stamp{Tagged: true, Sender: headers.SenderID{0x12}, Seq: int64(i + 1)}
		st.Clock.SetOffset(headers.Channel{Topic: txn, Partition: 0}, v)
		d.add("regress", simTopic(11), 0, incoming{Headers: stamped(t, st)})
	}
	// txn: a committed record, its marker, an aborted record (skipped by a
	// read_committed fetch), its marker, and an ordinary record.
	empty := stamped(t, &headers.Stamp{})
	d.add("txn", txn, 0, incoming{Offset: 0, Transactional: true, ProducerID: 1, Headers: empty})
	d.add("txn", txn, 0, incoming{Offset: 1, Control: true, Commit: true, Transactional: true, ProducerID: 1})
	d.add("txn", txn, 0, incoming{Offset: 3, Control: true, Transactional: true, ProducerID: 2})
	d.add("txn", txn, 0, incoming{Offset: 4, Headers: empty})
	for _, v := range []int64{1, 2} {
		st := &headers.Stamp{}
		st.Clock.SetOffset(headers.Channel{Topic: txn, Partition: 0}, v)
		d.add("claims", claims, 0, incoming{Headers: stamped(t, st)})
	}
	for i := range 2 {
		s := headers.SenderID{0x7e, byte(i)}
		d.add("retired", retired, 0, incoming{Headers: stamped(t, &headers.Stamp{Tagged: true, Sender: s, Seq: 1})})
		st := &headers.Stamp{}
		st.Clock.SetSeq(headers.Channel{Topic: retired, Partition: 0}, s, 1)
		d.add("carriers", carriers, int32(i), incoming{Headers: stamped(t, st)})
	}
	d.add("mixed", mixed, 0, incoming{Headers: empty})
	d.add("mixed", mixed, 1, incoming{})
	// Every claim of grow names a record that exists (offset 0 of a
	// channel written above), ever more of them.
	var firsts []headers.Channel
	for _, ch := range d.chans {
		if ch.Topic != txn && ch.Topic != mixed || ch.Partition == 0 {
			firsts = append(firsts, ch)
		}
	}
	for i := range 48 {
		st := &headers.Stamp{}
		for _, ch := range firsts[:min(len(firsts), i/3+1)] {
			st.Clock.SetOffset(ch, 0)
		}
		d.add("grow", grow, int32(i%2), incoming{Headers: stamped(t, st)})
	}
	cause := headers.Channel{Topic: placed, Partition: 0}
	d.add("placed", placed, 0, incoming{Headers: empty})
	st := &headers.Stamp{}
	st.Clock.SetOffset(cause, 0)
	home := kgo.StickyKeyPartitioner(nil).ForTopic("")
	key := []byte("k0")
	for i := 0; home.Partition(&kgo.Record{Key: key}, 2) != 0; i++ {
		key = []byte("k" + strconv.Itoa(i))
	}
	d.add("placed", placed, 1, incoming{Key: key, Headers: stamped(t, st)})
	for _, ch := range d.chans {
		d.written[ch] = len(d.recs[ch])
	}
	return d
}

// append writes new records to events (a sequence gap on one partition)
// and ledger (claims on events, one past the log end), written at once.
func (d *simData) append(t *testing.T) {
	d.appended++
	r := d.appended
	events, ledger := simTopic(1), simTopic(2)
	for p := range int32(4) {
		ch := headers.Channel{Topic: events, Partition: p}
		last := d.recs[ch][len(d.recs[ch])-1]
		var prev headers.Stamp
		headers.ReadStamp(&prev, last.Headers)
		seq := prev.Seq + 1
		if p == int32(r%4) {
			seq++ // a lost send
		}
		st := &headers.Stamp{Tagged: true, Sender: prev.Sender, Seq: seq}
		st.Clock.SetOffset(ch, last.Offset)
		d.add("events", events, p, incoming{Headers: stamped(t, st)})
		d.written[ch] = len(d.recs[ch])
	}
	q := int32(r % 3)
	ch := headers.Channel{Topic: ledger, Partition: q}
	st := &headers.Stamp{}
	for p := range int32(4) {
		e := headers.Channel{Topic: events, Partition: p}
		st.Clock.SetOffset(e, d.end(e)-1)
	}
	past := headers.Channel{Topic: events, Partition: int32(r % 4)}
	st.Clock.SetOffset(past, d.end(past)+10_000+int64(r))
	d.add("ledger", ledger, q, incoming{Headers: stamped(t, st)})
	d.written[ch] = len(d.recs[ch])
}

// simShard is one shard of the group.
type simShard struct {
	name    string
	path    string
	o       *Observer
	prod    *simProducer
	read    int // facts of the log applied
	alive   bool
	fetched map[headers.Channel]int // records of each assigned channel ingested
}

type simGroup struct {
	t      *testing.T
	ctx    context.Context
	r      *rand.Rand
	d      *simData
	log    *simLog
	shards []*simShard
	owner  map[headers.Channel]*simShard // nil: waiting for a shard
	trace  []string
}

func (g *simGroup) note(format string, args ...any) {
	g.trace = append(g.trace, fmt.Sprintf(format, args...))
}

func (g *simGroup) start(s *simShard) {
	t := g.t
	st, err := OpenStore(g.ctx, s.path)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"x"}, Group: "sim", Instance: s.name,
		Logger: slog.New(slog.DiscardHandler)}, st)
	if err != nil {
		t.Fatal(err)
	}
	s.prod = &simProducer{log: g.log}
	o.shard.facts = s.prod
	if err := st.resetMirror(g.ctx); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	if err := o.ensureWriter(g.ctx); err != nil {
		t.Fatal(err)
	}
	o.w.place.meta = g.d.parts
	o.mu.Unlock()
	s.o, s.read, s.alive, s.fetched = o, 0, true, map[headers.Channel]int{}
}

func (g *simGroup) stop(s *simShard) {
	s.o.Close()
	s.o.store.Close()
	s.alive = false
}

// mirror applies up to n more facts of the log to s.
func (g *simGroup) mirror(s *simShard, n int) {
	n = min(n, len(g.log.facts)-s.read)
	if n <= 0 {
		return
	}
	if err := s.o.store.applyFacts(g.ctx, g.log.facts[s.read:s.read+n]); err != nil {
		g.t.Fatal(err)
	}
	s.read += n
}

// take assigns ch to s, after it read the state topic to its end.
func (g *simGroup) take(s *simShard, ch headers.Channel) {
	g.mirror(s, len(g.log.facts))
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	pos, err := s.o.takeChannels(g.ctx, []takeSpec{{ch: ch, name: g.d.name[ch], end: g.d.end(ch)}})
	if err != nil {
		g.t.Fatal(err)
	}
	// Read from pos: the records before it are not fetched.
	s.fetched[ch] = 0
	for _, in := range g.d.recs[ch] {
		if in.Offset < pos[0] {
			s.fetched[ch]++
		}
	}
	g.owner[ch] = s
	g.note("%s takes %s from %d", s.name, g.d.name[ch]+"/"+strconv.Itoa(int(ch.Partition)), pos[0])
}

// release lets ch go from its owner, in good order.
func (g *simGroup) release(ch headers.Channel) {
	s := g.owner[ch]
	s.o.mu.Lock()
	s.o.releaseChannels(g.ctx, []headers.Channel{ch}, true)
	s.o.mu.Unlock()
	delete(s.fetched, ch)
	g.owner[ch] = nil
	g.note("%s lets %s/%d go", s.name, g.d.name[ch], ch.Partition)
}

// ingest feeds s the next up to n written records of ch.
func (g *simGroup) ingest(s *simShard, ch headers.Channel, n int) {
	i := s.fetched[ch]
	n = min(n, g.d.written[ch]-i)
	if n <= 0 {
		return
	}
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	if err := s.o.ingest(g.ctx, slices.Clone(g.d.recs[ch][i:i+n])); err != nil {
		g.t.Fatal(err)
	}
	s.fetched[ch] = i + n
}

func (g *simGroup) evaluate(s *simShard) {
	if _, err := s.o.store.evaluate(g.ctx, g.d.offsets(), time.Now(), 0); err != nil {
		g.t.Fatal(err)
	}
}

// evaluateUnlisted evaluates as if the brokers had not listed the offsets
// of some channels (their leaders moving), and returns their names.
func (g *simGroup) evaluateUnlisted(s *simShard) []string {
	offs := g.d.offsets()
	var names []string
	for _, ch := range g.d.chans {
		if g.r.IntN(2) == 0 {
			offs[ch] = ChannelOffsets{Name: g.d.name[ch], Unknown: true}
			names = append(names, fmt.Sprintf("%s/%d", g.d.name[ch], ch.Partition))
		}
	}
	if _, err := s.o.store.evaluate(g.ctx, offs, time.Now(), 0); err != nil {
		g.t.Fatal(err)
	}
	return names
}

func (g *simGroup) publish(s *simShard) {
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	if err := s.o.shard.publishFindings(g.ctx); err != nil {
		g.t.Fatal(err)
	}
}

func (g *simGroup) live() []*simShard {
	var out []*simShard
	for _, s := range g.shards {
		if s.alive {
			out = append(out, s)
		}
	}
	return out
}

func (g *simGroup) ownedBy(s *simShard) []headers.Channel {
	var out []headers.Channel
	for _, ch := range g.d.chans {
		if g.owner[ch] == s {
			out = append(out, ch)
		}
	}
	return out
}

// settle reads every channel, delivers and applies every fact, evaluates
// and publishes, until nothing changes.
func (g *simGroup) settle() {
	for _, ch := range g.d.chans {
		if g.owner[ch] == nil {
			live := g.live()
			g.take(live[g.r.IntN(len(live))], ch)
		}
	}
	for range 4 {
		for _, s := range g.live() {
			for _, ch := range g.ownedBy(s) {
				g.ingest(s, ch, len(g.d.recs[ch]))
			}
			s.prod.Flush(g.ctx)
		}
		for _, s := range g.live() {
			g.mirror(s, len(g.log.facts))
			g.evaluate(s)
			g.publish(s)
			s.prod.Flush(g.ctx)
		}
	}
	for _, s := range g.live() {
		g.mirror(s, len(g.log.facts))
	}
}

// raisedTwice returns the findings a shard recorded as resolved or
// reopened since since.
func (g *simGroup) raisedTwice(since time.Time) []string {
	var out []string
	for _, s := range g.live() {
		fs, _, err := s.o.store.readFindings(g.ctx, s.o.store.db)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, f := range fs {
			h, err := s.o.store.History(g.ctx, f.ID)
			if err != nil {
				g.t.Fatal(err)
			}
			for _, e := range h {
				if e.What != "acknowledged" && !e.At.Before(since) {
					out = append(out, fmt.Sprintf("%s: %s %s (%s)", s.name, f.Key, e.What, e.Why))
				}
			}
		}
	}
	return out
}

func simShape(f Finding) string {
	return fmt.Sprintf("%s %s [%s] n=%d: %s", f.State, f.Key, strings.Join(f.Coordinates, " "), f.Count, f.Summary)
}

// TestShardSimulation runs the group over seeds (PARSLEY_SHARD_SIM_SEEDS,
// default 6; steps each PARSLEY_SHARD_SIM_STEPS, default 250).
func TestShardSimulation(t *testing.T) {
	seeds, steps := 6, 250
	if v, err := strconv.Atoi(os.Getenv("PARSLEY_SHARD_SIM_SEEDS")); err == nil {
		seeds = v
	}
	if v, err := strconv.Atoi(os.Getenv("PARSLEY_SHARD_SIM_STEPS")); err == nil {
		steps = v
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { simulate(t, seed, steps) })
	}
}

func simulate(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	dir := t.TempDir()
	g := &simGroup{t: t, ctx: ctx, r: rand.New(rand.NewPCG(seed, 52)), d: newSimData(t), log: &simLog{}, owner: map[headers.Channel]*simShard{}}
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, the last steps:\n  %s", seed, strings.Join(g.trace[max(0, len(g.trace)-40):], "\n  "))
		}
	}()
	for _, name := range []string{"a", "b", "c"} {
		s := &simShard{name: name, path: filepath.Join(dir, name+".db")}
		g.start(s)
		g.shards = append(g.shards, s)
		t.Cleanup(func() {
			if s.alive {
				g.stop(s)
			}
		})
	}
	for i, ch := range g.d.chans {
		g.take(g.shards[i%3], ch)
	}
	g.settle()
	// Every finding so far, acknowledged through shard a: the
	// acknowledgements must follow the findings through every move.
	acked := map[string]bool{}
	fs, err := g.shards[0].o.store.evaluate(ctx, g.d.offsets(), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[Code]bool{}
	for _, f := range fs {
		if _, err := g.shards[0].o.Acknowledge(ctx, f.ID, "judge", "known"); err != nil {
			t.Fatal(err)
		}
		acked[f.Key], codes[f.Code] = true, true
	}
	if len(codes) != len(AllCodes()) {
		t.Fatalf("the topology gives findings of %v only", codes)
	}
	g.settle()
	since := time.Now()
	for step := range steps {
		live := g.live()
		s := live[g.r.IntN(len(live))]
		switch k := g.r.IntN(100); {
		case k < 6:
			g.d.append(t)
			g.note("records appended")
		case k < 40:
			if own := g.ownedBy(s); len(own) > 0 {
				ch := own[g.r.IntN(len(own))]
				g.ingest(s, ch, 1+g.r.IntN(4))
				g.note("%s ingests %s/%d to %d", s.name, g.d.name[ch], ch.Partition, s.fetched[ch])
			}
		case k < 44:
			g.evaluate(s)
			g.note("%s evaluates", s.name)
		case k < 50:
			unlisted := g.evaluateUnlisted(s)
			g.note("%s evaluates, the offsets of %v unlisted", s.name, unlisted)
		case k < 60:
			g.publish(s)
			g.note("%s publishes", s.name)
		case k < 68:
			if n := len(s.prod.pending); n > 0 {
				s.prod.deliver(1 + g.r.IntN(n))
				g.note("%s's facts delivered", s.name)
			}
		case k < 80:
			g.mirror(s, 1+g.r.IntN(20))
			g.note("%s reads the state topic to %d", s.name, s.read)
		case k < 88:
			// A rebalance moves a channel in good order: revoked (the
			// revoke flushes), then assigned elsewhere.
			own := g.ownedBy(s)
			if len(own) == 0 || len(live) < 2 {
				break
			}
			ch := own[g.r.IntN(len(own))]
			g.release(ch)
			s.prod.Flush(ctx)
			to := live[g.r.IntN(len(live))]
			for to == s {
				to = live[g.r.IntN(len(live))]
			}
			g.take(to, ch)
		case k < 91:
			if len(live) < 2 {
				break
			}
			// kill -9: undelivered facts lost; the store stays.
			s.prod.pending = nil
			g.stop(s)
			for _, ch := range g.ownedBy(s) {
				g.owner[ch] = nil
			}
			g.note("%s killed", s.name)
		case k < 95:
			// The session timed out: channels without a shard move.
			for _, ch := range g.d.chans {
				if g.owner[ch] == nil {
					g.take(live[g.r.IntN(len(live))], ch)
				}
			}
		default:
			for _, dead := range g.shards {
				if !dead.alive {
					g.start(dead)
					g.note("%s restarts", dead.name)
					break
				}
			}
		}
		if bad := g.raisedTwice(since); len(bad) > 0 {
			t.Fatalf("step %d: raised twice:\n  %s", step, strings.Join(bad, "\n  "))
		}
	}
	for _, s := range g.shards {
		if !s.alive {
			g.start(s)
		}
	}
	g.settle()
	if bad := g.raisedTwice(since); len(bad) > 0 {
		t.Fatalf("at the end: raised twice:\n  %s", strings.Join(bad, "\n  "))
	}

	// One observer over the same records.
	st, err := OpenStore(ctx, filepath.Join(dir, "single.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := newWriter(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, ch := range g.d.chans {
		if err := w.ingest(ctx, g.d.recs[ch][:g.d.written[ch]]); err != nil {
			t.Fatal(err)
		}
	}
	single, err := st.evaluate(ctx, g.d.offsets(), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range single {
		if acked[f.Key] {
			f.State = StateAcknowledged
		}
		want = append(want, simShape(f))
	}
	slices.Sort(want)
	for _, s := range g.live() {
		fs, err := s.o.store.evaluate(ctx, g.d.offsets(), time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range fs {
			got = append(got, simShape(f))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("shard %s lists\n  %s\nwant (one observer)\n  %s", s.name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

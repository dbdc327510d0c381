package protocol

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// world is a seeded, randomly generated input for one node: per channel a
// log of records (with markers between some of them) whose stamps claim only
// records appended earlier, and an interleaving of fetches and position
// advances that honours host duties H1 and H2.
type world struct {
	chans  []headers.Channel
	logs   [][]*Record // per channel, in offset order
	ends   []int64     // per channel, one past the last offset (markers included)
	events []event
	// Ground truth, kept apart from the stamps: what each record really
	// depends on, and who sent it.
	truth map[headers.Coordinate]truth
}

type truth struct {
	offs   []headers.OffsetEntry
	seqs   []headers.SeqEntry
	sender headers.SenderID
	seq    int64 // -1 when untagged
}

type event struct {
	ch      int
	fetch   bool  // fetch the next record of ch
	pos     int64 // else: report this position on ch
	flushed bool  // end of step after this event
}

func genWorld(seed uint64) *world {
	r := rand.New(rand.NewPCG(seed, 7))
	w := &world{chans: []headers.Channel{a0, b0, c0}, truth: map[headers.Coordinate]truth{}}
	nch := len(w.chans)
	w.logs = make([][]*Record, nch)
	w.ends = make([]int64, nch)
	senders := []headers.SenderID{{1}, {2}, {3}, {4}}
	type appended struct {
		ch          int
		off         int64
		sender, seq int64
	}
	var hist []appended
	seqs := make([][]int64, len(senders)) // per sender, per channel: last seq
	for i := range seqs {
		seqs[i] = []int64{-1, -1, -1}
	}
	for range 120 + r.IntN(80) {
		ch := r.IntN(nch)
		if r.IntN(3) == 0 {
			w.ends[ch] += 1 + int64(r.IntN(3)) // aborted records
		}
		o := w.ends[ch]
		w.ends[ch]++
		if r.IntN(2) == 0 {
			w.ends[ch]++ // the record's commit marker
		}
		var s st
		si := r.IntN(len(senders))
		if r.IntN(4) > 0 {
			seqs[si][ch]++
			s.sender, s.seq = &senders[si], seqs[si][ch]
		} else {
			si = -1
		}
		for range r.IntN(3) {
			if len(hist) == 0 {
				break
			}
			h := hist[r.IntN(len(hist))]
			if h.sender >= 0 && r.IntN(2) == 0 {
				s.seqs = append(s.seqs, sq(w.chans[h.ch], senders[h.sender], h.seq))
			} else {
				s.offs = append(s.offs, off(w.chans[h.ch], h.off))
			}
		}
		if r.IntN(5) == 0 {
			s.offs = append(s.offs, off(x0, int64(r.IntN(100))))
		}
		// A claim may also name the latest offset of another channel,
		// which is often a marker (a record's commit marker): the shape
		// that needs the fold behind a held head.
		if oc := (ch + 1 + r.IntN(nch-1)) % nch; r.IntN(3) == 0 && w.ends[oc] > 0 {
			s.offs = append(s.offs, off(w.chans[oc], w.ends[oc]-1))
		}
		var sseq int64 = -1
		if si >= 0 {
			sseq = s.seq
		}
		hist = append(hist, appended{ch, o, int64(si), sseq})
		tr := truth{offs: s.offs, seqs: s.seqs, seq: sseq}
		if si >= 0 {
			tr.sender = senders[si]
		}
		w.truth[at(w.chans[ch], o)] = tr
		rec := &Record{Coordinate: at(w.chans[ch], o), Timestamp: int64(r.IntN(1 << 20)), Headers: s.headers(nil)}
		switch r.IntN(4) {
		case 0:
			rec.Key, rec.Value = nil, []byte{}
		case 1:
			rec.Key, rec.Value = []byte{}, nil
		default:
			rec.Key, rec.Value = []byte(fmt.Sprint("k", o)), []byte(fmt.Sprint("v", o))
		}
		if r.IntN(3) == 0 {
			rec.Headers = append([]headers.Header{{Key: "app", Value: []byte(fmt.Sprint(o))}, {Key: "nil", Value: nil}}, rec.Headers...)
		}
		w.logs[ch] = append(w.logs[ch], rec)
	}
	// Interleave: fetch channels at random rates; after a fetch, sometimes
	// report the position (up to the next record's offset, never past it).
	next := make([]int, nch)
	posOf := func(ch int) int64 {
		if next[ch] < len(w.logs[ch]) {
			return w.logs[ch][next[ch]].Offset
		}
		return w.ends[ch]
	}
	weights := []int{1 + r.IntN(4), 1 + r.IntN(4), 1 + r.IntN(4)}
	for {
		var open []int
		for ch := range nch {
			if next[ch] < len(w.logs[ch]) {
				for range weights[ch] {
					open = append(open, ch)
				}
			}
		}
		if len(open) == 0 {
			break
		}
		ch := open[r.IntN(len(open))]
		w.events = append(w.events, event{ch: ch, fetch: true})
		next[ch]++
		if r.IntN(3) == 0 {
			w.events = append(w.events, event{ch: ch, pos: posOf(ch)})
		}
		if r.IntN(6) == 0 {
			w.events[len(w.events)-1].flushed = true
		}
	}
	for ch := range nch {
		w.events = append(w.events, event{ch: ch, pos: w.ends[ch]})
	}
	w.events[len(w.events)-1].flushed = true
	return w
}

// play runs w against a node; with restart, the node is rebuilt from its
// store after every flush (re-reporting the positions it had been told, as
// a host does), which must change nothing a consumer can see.
func (w *world) play(t *testing.T, restart bool) (delivered []string, store []Mutation, held int) {
	t.Helper()
	e := newEnv(t, w.chans, []headers.TopicID{tid(31)})
	e.offs.ends[tid(31)] = []int64{0, 0}
	n := e.node()
	record := func(n *Node, ds []Delivery) {
		for _, d := range ds {
			var b bytes.Buffer
			fmt.Fprintf(&b, "%v ts=%d key=%q/%v val=%q/%v hdrs=%v", d.Coordinate, d.Timestamp, d.Key, d.Key == nil, d.Value, d.Value == nil, d.Headers == nil)
			for _, h := range d.Headers {
				fmt.Fprintf(&b, " %s=%x/%v", h.Key, h.Value, h.Value == nil)
			}
			delivered = append(delivered, b.String())
			// Every delivery emits one record, appended to the sink (so a
			// restarted node's own-outputs seed covers it). The stamp's
			// form legitimately changes across a restart (sequence claims
			// on earlier sends become offset claims), so only its sequence
			// is compared.
			p := d.Offset % 2
			s := prepare(t, n, chn(31, int32(p)))
			e.offs.ends[tid(31)][p]++
			delivered = append(delivered, fmt.Sprintf("send seq=%d", s.Seq))
		}
	}
	n = w.drive(t, e, n, restart, record)
	return delivered, e.store.Entries(), n.Counters().Held
}

// TestRestartTransparencyAndDrain: on seeded random worlds, a node rebuilt
// from its store after every step delivers exactly the records, bytes and
// stamps a node that never restarts delivers, and both drain completely
// (liveness: claims name only appended offsets, markers included, and every
// skip is revealed by a later record or a position).
func TestRestartTransparencyAndDrain(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	heldSeeds := 0
	for seed := range uint64(seeds) {
		w := genWorld(seed)
		d1, s1, h1 := w.play(t, false)
		d2, s2, h2 := w.play(t, true)
		total := 0
		for _, l := range w.logs {
			total += len(l)
		}
		if got := len(d1) / 2; got != total || h1 != 0 {
			t.Fatalf("seed %d: delivered %d of %d, %d still held", seed, got, total, h1)
		}
		if !reflect.DeepEqual(d1, d2) {
			for i := range min(len(d1), len(d2)) {
				if d1[i] != d2[i] {
					t.Fatalf("seed %d: delivery %d differs across restarts:\n%s\n%s", seed, i, d1[i], d2[i])
				}
			}
			t.Fatalf("seed %d: %d vs %d deliveries", seed, len(d1), len(d2))
		}
		if h2 != 0 || !reflect.DeepEqual(s1, s2) {
			for i := range max(len(s1), len(s2)) {
				var a, b Mutation
				if i < len(s1) {
					a = s1[i]
				}
				if i < len(s2) {
					b = s2[i]
				}
				if a.Key != b.Key || !bytes.Equal(a.Value, b.Value) {
					t.Errorf("%s=%x\n%s=%x", a.Key, a.Value, b.Key, b.Value)
				}
			}
			t.Fatalf("seed %d: store differs across restarts", seed)
		}
		if maxHeldInWorld(t, w) > 3 {
			heldSeeds++
		}
	}
	// Anti-vacuity, counted in seeds: most worlds must actually hold records.
	if heldSeeds < seeds/2 {
		t.Fatalf("only %d of %d seeds held more than 3 records at once", heldSeeds, seeds)
	}
}

func maxHeldInWorld(t *testing.T, w *world) int {
	n := newEnv(t, w.chans, nil).node()
	next := make([]int, len(w.chans))
	m := 0
	for _, ev := range w.events {
		if ev.fetch {
			if _, err := n.OnRecord(w.logs[ev.ch][next[ev.ch]]); err != nil {
				t.Fatal(err)
			}
			next[ev.ch]++
		} else if _, err := n.PositionAdvance(w.chans[ev.ch], ev.pos); err != nil {
			t.Fatal(err)
		}
		m = max(m, n.Counters().Held)
	}
	return m
}

// drive feeds w's events to n in order and hands every call's deliveries,
// with the node that made them, to seen. With restart, the node is rebuilt from its store after every flush
// and told the positions its predecessor had been told, as a host does (H5).
// It returns the node that saw the last event.
func (w *world) drive(t *testing.T, e *env, n *Node, restart bool, seen func(*Node, []Delivery)) *Node {
	t.Helper()
	next := make([]int, len(w.chans))
	pos := make([]int64, len(w.chans))
	for _, ev := range w.events {
		var ds []Delivery
		var err error
		if ev.fetch {
			ds, err = n.OnRecord(w.logs[ev.ch][next[ev.ch]])
			next[ev.ch]++
		} else {
			pos[ev.ch] = ev.pos
			ds, err = n.PositionAdvance(w.chans[ev.ch], ev.pos)
		}
		if err != nil {
			t.Fatal(err)
		}
		seen(n, ds)
		if !ev.flushed {
			continue
		}
		flush(t, n)
		if !restart {
			continue
		}
		n = e.node()
		for ch, p := range pos {
			if p > 0 {
				ds, err := n.PositionAdvance(w.chans[ch], p)
				if err != nil {
					t.Fatal(err)
				}
				seen(n, ds)
			}
		}
	}
	return n
}

// judge plays w against a node with the given sabotage, rebuilding it after
// every flush when restart is set, and returns the first violation of causal
// order, per-channel FIFO, no-duplicates or completeness, judged against
// the world's ground truth, never against the node's clocks. "" means none.
func (w *world) judge(t *testing.T, sab sabotageSet, restart bool) string {
	e := newEnv(t, w.chans, nil)
	e.sab = sab
	n := e.node()
	delivered := map[headers.Coordinate]bool{}
	last := map[headers.Channel]int64{}
	violation := ""
	check := func(_ *Node, ds []Delivery) {
		for _, d := range ds {
			c := d.Coordinate
			switch {
			case violation != "":
				return
			case delivered[c]:
				violation = fmt.Sprintf("duplicate %v", c)
				return
			case d.Offset <= last[d.Channel]-1:
				violation = fmt.Sprintf("FIFO: %v after offset %d", c, last[d.Channel]-1)
				return
			}
			tr := w.truth[c]
			for _, cl := range tr.offs {
				for _, r := range w.logOf(cl.Channel) {
					if r.Offset <= cl.Offset && !delivered[r.Coordinate] {
						violation = fmt.Sprintf("causal: %v delivered before its cause %v", c, r.Coordinate)
						return
					}
				}
			}
			for _, cl := range tr.seqs {
				for _, r := range w.logOf(cl.Channel) {
					if rt := w.truth[r.Coordinate]; rt.seq >= 0 && rt.sender == cl.Sender && rt.seq <= cl.Seq && !delivered[r.Coordinate] {
						violation = fmt.Sprintf("causal: %v delivered before its cause %v (sequence claim)", c, r.Coordinate)
						return
					}
				}
			}
			delivered[c] = true
			last[d.Channel] = d.Offset + 1
		}
	}
	w.drive(t, e, n, restart, check)
	if violation != "" {
		return violation
	}
	for _, l := range w.logs {
		for _, r := range l {
			if !delivered[r.Coordinate] {
				return fmt.Sprintf("completeness: %v never delivered", r.Coordinate)
			}
		}
	}
	return ""
}

func (w *world) logOf(ch headers.Channel) []*Record {
	for i, c := range w.chans {
		if c == ch {
			return w.logs[i]
		}
	}
	return nil
}

// oracleSeeds is the number of seeded worlds the oracle tests play.
func oracleSeeds() int {
	if testing.Short() {
		return 10
	}
	return 60
}

// TestOracleOnRandomWorlds: the node passes a ground-truth oracle (causal
// order, FIFO, no duplicates, completeness) on every seeded world, with and
// without restarts. That the oracle is not vacuous is
// TestOracleCatchesSabotage's, in parsley_sabotage builds.
func TestOracleOnRandomWorlds(t *testing.T) {
	var correct sabotageSet
	for seed := range uint64(oracleSeeds()) {
		w := genWorld(seed)
		for _, restart := range []bool{false, true} {
			if v := w.judge(t, correct, restart); v != "" {
				t.Fatalf("seed %d restart=%v: %s", seed, restart, v)
			}
		}
	}
}

package sim

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// ProducerSpec describes a plain client at the topology's edge: a
// sequential producer whose every send claims its earlier acknowledged
// sends and, when it observes channels, every record it consumed there
// (the clock package's rules: Observe before producing, RecordProduced on
// acknowledgement). It stamps truthfully; it never gates.
type ProducerSpec struct {
	Name    string
	Targets []Ref // where it sends, drawn per send
	Observe []Ref // plain read_committed consumption, from the earliest offset
	Ops     int   // sends to make
	// Transactional producers send one to three records per transaction
	// and abort about one transaction in six: their logs fill with markers
	// and aborted records.
	Transactional bool
	// CorruptAt, when positive, makes the producer's CorruptAt-th send
	// carry a vc header that does not decode; that send goes to the first
	// target.
	CorruptAt int
	// MaxHops is the largest hop budget written into a value's first byte
	// (see Damped); 0 writes 0.
	MaxHops int
	// OpenAcross keeps each transaction of a Transactional producer open
	// across several operations, one send each, so other actors fetch,
	// restart and seed their own outputs while it is open: the last stable
	// offset sits below the log end.
	OpenAcross bool
}

// EdgeProducer is the running form of a ProducerSpec.
type EdgeProducer struct {
	spec    ProducerSpec
	w       *World
	actor   int
	ops     int
	clock   headers.Clock // acknowledged sends and observed records
	targets []headers.Channel
	observe []headers.Channel
	pos     map[headers.Channel]int64
	seq     int
	open    int           // the open transaction of an OpenAcross producer; 0 = none
	inOpen  int           // sends made in it
	before  headers.Clock // the clock when the open transaction began
}

// Name returns the producer's name.
func (p *EdgeProducer) Name() string { return p.spec.Name }

// Done reports whether the producer has made all its sends.
func (p *EdgeProducer) Done() bool { return p.ops >= p.spec.Ops }

func (p *EdgeProducer) observable() (headers.Channel, int64, *Entry, bool) {
	for _, ch := range p.observe {
		if e, off, ok := p.w.Broker.Next(ch, p.pos[ch]); ok {
			return ch, off, e, true
		}
	}
	return headers.Channel{}, 0, nil, false
}

// observeOne consumes the next record on one observed channel and folds it
// (clock.Observe).
func (p *EdgeProducer) observeOne() error {
	ch, off, e, ok := p.observable()
	if !ok {
		return nil
	}
	var st headers.Stamp
	if err := headers.ReadStamp(&st, e.Headers); err != nil {
		return fmt.Errorf("sim: %s observes %v@%d: %w", p.spec.Name, ch, off, err)
	}
	p.clock.Merge(&st.Clock)
	p.clock.SetOffset(ch, off)
	p.pos[ch] = off + 1
	p.w.Oracle.Observe(p.actor, headers.Coordinate{Channel: ch, Offset: off})
	p.w.Oracle.Commit(p.actor)
	p.w.trace("observe %s %v@%d", p.spec.Name, ch, off)
	return nil
}

// op is one producer operation: observe a record (when it can, half the
// time) or make a send (a transaction of a few sends when transactional).
func (p *EdgeProducer) op() error {
	if _, _, _, ok := p.observable(); ok && p.open == 0 && p.w.rng.IntN(2) == 0 {
		return p.observeOne()
	}
	n, txn := 1, 0
	switch {
	case p.spec.Transactional && p.spec.OpenAcross:
		if p.open == 0 {
			p.open, p.inOpen = p.w.Broker.Begin(), 0
			p.before.CopyFrom(&p.clock)
		}
		txn = p.open
	case p.spec.Transactional:
		n = 1 + p.w.rng.IntN(3)
		txn = p.w.Broker.Begin()
		p.before.CopyFrom(&p.clock)
	}
	n = min(n, p.spec.Ops-p.ops)
	type sent struct {
		ch  headers.Channel
		off int64
	}
	var acks []sent
	for range n {
		ch := p.targets[p.w.rng.IntN(len(p.targets))]
		if p.seq+1 == p.spec.CorruptAt {
			ch = p.targets[0]
		}
		st := headers.Stamp{}
		st.Clock.CopyFrom(&p.clock)
		d := headers.DialectCauses
		if st.Clock.NumSeqs() > 0 {
			d = headers.DialectVC
		}
		hs, err := headers.AppendStamp([]headers.Header(nil), &st, d)
		if err != nil {
			return err
		}
		var v byte
		if p.spec.MaxHops > 0 {
			v = byte(p.w.rng.IntN(p.spec.MaxHops + 1))
		}
		p.seq++
		if p.seq == p.spec.CorruptAt {
			hs = []headers.Header{{Key: headers.HeaderVC, Value: []byte{9, 9}}}
		}
		key := []byte(fmt.Sprintf("%s-%d", p.spec.Name, p.seq))
		if p.w.shapes&1 == 0 && p.seq != p.spec.CorruptAt {
			key, hs = p.shape(key, hs, st.Clock.NumOffsets() == 0 && st.Clock.NumSeqs() == 0 ||
				len(p.targets) == 1 && len(p.observe) == 0)
		}
		id := p.w.Oracle.NewID(p.actor)
		off, err := p.w.Broker.Append(ch, txn, key, []byte{v, byte(p.seq)}, hs, id)
		if err != nil {
			return err
		}
		p.w.Oracle.Emit(p.actor, id, headers.Coordinate{Channel: ch, Offset: off})
		p.w.trace("produce %s %v@%d", p.spec.Name, ch, off)
		acks = append(acks, sent{ch, off})
		p.ops++
		// RecordProduced: the acknowledgement comes back before the next
		// send, inside a transaction too, where the claimed record commits
		// or aborts with the claiming one.
		p.clock.SetOffset(ch, off)
	}
	if txn == 0 {
		p.w.Oracle.Commit(p.actor)
		return nil
	}
	sends := len(acks)
	if p.open != 0 {
		p.inOpen += sends
		if p.ops < p.spec.Ops && p.w.rng.IntN(3) != 0 {
			return nil // still open: the next operation sends in it too
		}
		p.open, sends = 0, p.inOpen
	}
	if p.w.rng.IntN(6) == 0 {
		p.w.Broker.Abort(txn)
		p.w.Oracle.Abort(p.actor)
		// An aborted send is no record: later stamps must not name it
		// (wire constraint 8), so the clock forgets the transaction.
		p.clock.CopyFrom(&p.before)
		p.ops -= sends
		p.w.stats.EdgeAborts++
		p.w.trace("abort %s", p.spec.Name)
		return nil
	}
	p.w.Broker.Commit(txn)
	p.w.Oracle.Commit(p.actor)
	return nil
}

// shape gives a send the shapes a real host's records have and no stamping
// producer's do, deterministically from its sequence and the seed, so a
// held record restored after a restart must come back byte for byte
// (nil and empty told apart; the delivery check in SimNode.deliver):
// every third send an empty key (not nil), and a user header after the
// stamp on three sends in four: a one-byte name with an empty value, one
// with a nil value, or an empty name. A send whose clock is empty (a
// producer's first, before it observed anything) claims nothing, so on
// some seeds it is a plain client's record: no stamp header at all, only
// an empty (not nil) header slice or the single header "u" with an empty
// value, 9 bytes in the held encoding. So is every send of a producer
// with one target that observes nothing: its only real past is its own
// earlier sends, on the same partition, which every consumer delivers
// first in offset order, so its stamp claims nothing a consumer needs.
func (p *EdgeProducer) shape(key []byte, hs []headers.Header, plain bool) ([]byte, []headers.Header) {
	if p.seq%3 == 0 {
		key = []byte{}
	}
	if plain && (p.w.shapes>>1)%3 != 0 {
		if (p.w.shapes>>1)%3 == 1 {
			return key, []headers.Header{}
		}
		return key, []headers.Header{{Key: "u", Value: []byte{}}}
	}
	switch p.seq % 4 {
	case 1:
		hs = append(hs, headers.Header{Key: "u", Value: []byte{}})
	case 2:
		hs = append(hs, headers.Header{Key: "v"})
	case 3:
		hs = append(hs, headers.Header{Key: "", Value: []byte{7}})
	}
	return key, hs
}

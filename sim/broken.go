package sim

import (
	"context"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// EagerProtocol is a deliberately broken Protocol for the oracle's
// self-test (V8): it delivers every record the moment it is fed, ignoring
// every claim, and stamps the union of everything it received. A harness
// whose oracle does not flag it is not a harness.
func EagerProtocol(_ context.Context, cfg protocol.Config) (Protocol, error) {
	return &eager{sender: protocol.SenderIDFor(cfg.ApplicationID, cfg.Stage, cfg.Partition), seq: map[headers.Channel]int64{}}, nil
}

type eager struct {
	sender headers.SenderID
	clock  headers.Clock
	seq    map[headers.Channel]int64
	n      uint64
	st     uint64
}

func (e *eager) OnRecord(rec *protocol.Record) ([]protocol.Delivery, error) {
	d := protocol.Delivery{Record: *rec}
	if err := headers.ReadStamp(&d.Stamp, rec.Headers); err != nil {
		return nil, err
	}
	e.clock.Merge(&d.Stamp.Clock)
	e.clock.SetOffset(rec.Channel, rec.Offset)
	e.n++
	return []protocol.Delivery{d}, nil
}

func (e *eager) PositionAdvance(headers.Channel, int64) ([]protocol.Delivery, error) { return nil, nil }
func (e *eager) Release() ([]protocol.Delivery, error)                               { return nil, nil }
func (e *eager) ResumePositions() []protocol.Position                                { return nil }
func (e *eager) TruncateToLogStarts(context.Context) error                           { return nil }
func (e *eager) Flush() error                                                        { return nil }
func (e *eager) Sent(headers.Coordinate) error                                       { return nil }
func (e *eager) Counters() protocol.Counters                                         { return protocol.Counters{Delivered: e.n, Stamps: e.st} }

func (e *eager) PrepareSend(dest headers.Channel) (*headers.Stamp, error) {
	s := &headers.Stamp{Tagged: true, Sender: e.sender}
	s.Clock.CopyFrom(&e.clock)
	s.Seq = e.seq[dest]
	e.seq[dest]++
	e.st++
	return s, nil
}

// Sabotage is a deliberate defect injected around the real protocol, for
// the self-tests: each must be caught on a measured share of seeds. They
// sit at the host seam (the protocol package has no test-only switches
// yet), so each models the protocol-internal defect of the same name as
// closely as the seam allows.
type Sabotage uint8

const (
	// SabotageNone is the real protocol.
	SabotageNone Sabotage = iota
	// IgnoreClaims: every record is delivered on arrival (EagerProtocol).
	IgnoreClaims
	// DropHeldRecord: the first record an incarnation releases from its
	// hold queue (not on its own arrival) is lost.
	DropHeldRecord
	// StampReadAsAbsent: every record is fed with its stamp headers
	// stripped, as if an undecodable stamp were read as absent.
	StampReadAsAbsent
	// NoSequenceClaims: stamps lose their sequence claims, as if delivered
	// sequence marks were forgotten and claims could never be expressed.
	NoSequenceClaims
	// FrontierOnlyStamp: stamps keep only claims on the node's own inputs,
	// dropping advertised clocks of unconsumed channels, carried ancestry
	// and own outputs (the ignore branch's hole).
	FrontierOnlyStamp
	// SkipTruncation: truncation sweeps do nothing, so stamps keep
	// claiming topics that no longer exist.
	SkipTruncation
	// ResumeAhead: ResumePositions names one offset past the real one, so
	// a restarted host skips a record.
	ResumeAhead
)

// Sabotages lists every sabotage, for the self-tests.
func Sabotages() []Sabotage {
	return []Sabotage{IgnoreClaims, DropHeldRecord, StampReadAsAbsent, NoSequenceClaims, FrontierOnlyStamp, SkipTruncation, ResumeAhead}
}

func (s Sabotage) String() string {
	switch s {
	case SabotageNone:
		return "none"
	case IgnoreClaims:
		return "ignore-claims"
	case DropHeldRecord:
		return "drop-held-record"
	case StampReadAsAbsent:
		return "stamp-read-as-absent"
	case NoSequenceClaims:
		return "no-sequence-claims"
	case FrontierOnlyStamp:
		return "frontier-only-stamp"
	case SkipTruncation:
		return "skip-truncation"
	case ResumeAhead:
		return "resume-ahead"
	}
	return "Sabotage(?)"
}

// Sabotaged returns a NewProtocol that injects s around the real protocol.
func Sabotaged(s Sabotage) NewProtocol {
	if s == IgnoreClaims {
		return EagerProtocol
	}
	return func(ctx context.Context, cfg protocol.Config) (Protocol, error) {
		p, err := RealProtocol(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &sabotaged{Protocol: p, s: s, inputs: slices.Clone(cfg.Inputs)}, nil
	}
}

type sabotaged struct {
	Protocol
	s       Sabotage
	inputs  []headers.Channel
	dropped bool
}

func (b *sabotaged) OnRecord(rec *protocol.Record) ([]protocol.Delivery, error) {
	if b.s == StampReadAsAbsent {
		r := *rec
		r.Headers = slices.DeleteFunc(slices.Clone(rec.Headers), func(h headers.Header) bool { return headers.IsReserved(h.Key) })
		rec = &r
	}
	ds, err := b.Protocol.OnRecord(rec)
	if err != nil || b.s != DropHeldRecord || b.dropped {
		return ds, err
	}
	for i := range ds {
		if ds[i].Coordinate != rec.Coordinate {
			b.dropped = true
			return slices.Delete(slices.Clone(ds), i, i+1), nil
		}
	}
	return ds, nil
}

func (b *sabotaged) PrepareSend(dest headers.Channel) (*headers.Stamp, error) {
	st, err := b.Protocol.PrepareSend(dest)
	if err != nil {
		return nil, err
	}
	switch b.s {
	case NoSequenceClaims:
		st.Clock.RetainSeqs(func(headers.SeqEntry) bool { return false })
	case FrontierOnlyStamp:
		st.Clock.RetainOffsets(func(e headers.OffsetEntry) bool { return slices.Contains(b.inputs, e.Channel) })
		st.Clock.RetainSeqs(func(e headers.SeqEntry) bool { return slices.Contains(b.inputs, e.Channel) })
	}
	return st, nil
}

func (b *sabotaged) ResumePositions() []protocol.Position {
	ps := b.Protocol.ResumePositions()
	if b.s == ResumeAhead {
		for i := range ps {
			ps[i].Offset++
		}
	}
	return ps
}

func (b *sabotaged) TruncateToLogStarts(ctx context.Context) error {
	if b.s == SkipTruncation {
		return nil
	}
	return b.Protocol.TruncateToLogStarts(ctx)
}

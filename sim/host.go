package sim

import (
	"context"
	"math/rand/v2"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Protocol is the host-facing surface of a causal node as the simulator
// drives it. *protocol.Node implements it; the self-tests substitute
// deliberately broken implementations, and a vendored or alternative
// implementation plugs in through Options.NewProtocol.
type Protocol interface {
	OnRecord(rec *protocol.Record) ([]protocol.Delivery, error)
	PositionAdvance(ch headers.Channel, pos int64) ([]protocol.Delivery, error)
	Release() ([]protocol.Delivery, error)
	PrepareSend(dest headers.Channel) (*headers.Stamp, error)
	Sent(at headers.Coordinate) error
	ResumePositions() []protocol.Position
	TruncateToLogStarts(ctx context.Context) error
	Flush() error
	Counters() protocol.Counters
}

// NewProtocol builds a Protocol from a node configuration, restoring from
// cfg.Store (host duty H5).
type NewProtocol func(ctx context.Context, cfg protocol.Config) (Protocol, error)

// RealProtocol is the NewProtocol of the real causal node, protocol.New.
func RealProtocol(ctx context.Context, cfg protocol.Config) (Protocol, error) {
	n, err := protocol.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// HostFault makes every SimNode shirk one host duty (reference 17, H1–H6),
// so the self-tests can prove the kit catches a broken host.
type HostFault uint8

const (
	// NoFault: the reference host, upholding every duty.
	NoFault HostFault = iota
	// BreakAtomicity (H3): a crash mid-step commits the store and the
	// consumed positions although the step's sends abort.
	BreakAtomicity
	// WithholdPositionAdvance (H2): the consumer position moves past
	// markers and aborted records but PositionAdvance is never called.
	WithholdPositionAdvance
	// FeedOutOfOrder (H1): when two records are fetchable the host feeds
	// the later first, and ignores the refusal of the earlier.
	FeedOutOfOrder
	// SkipOwnOutputSeed (H5): the host never reports its sends' offsets
	// (Sent) and the BrokerOffsets handed to New reports every sink as
	// empty, so restarts seed no own outputs.
	SkipOwnOutputSeed
	// IgnoreLogStart (H6): restart positions are not clamped to the log
	// start and retention ignores subscribers' lag.
	IgnoreLogStart
	// AdvanceAhead (H2): the reported position runs one past the last
	// stable offset, ahead of a record not yet fed.
	AdvanceAhead
)

// HostFaults lists every fault, for the self-tests.
func HostFaults() []HostFault {
	return []HostFault{BreakAtomicity, WithholdPositionAdvance, FeedOutOfOrder, SkipOwnOutputSeed, IgnoreLogStart, AdvanceAhead}
}

func (f HostFault) String() string {
	switch f {
	case NoFault:
		return "none"
	case BreakAtomicity:
		return "break-atomicity"
	case WithholdPositionAdvance:
		return "withhold-position-advance"
	case FeedOutOfOrder:
		return "feed-out-of-order"
	case SkipOwnOutputSeed:
		return "skip-own-output-seed"
	case IgnoreLogStart:
		return "ignore-log-start"
	case AdvanceAhead:
		return "advance-ahead"
	}
	return "HostFault(?)"
}

// Emission is one record a stage's logic sends. Partition -1 lets the host
// pick one (the partitioner).
type Emission struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
}

// Logic is a stage's user logic: the records to send for one delivered
// record. It may draw from r (the world's seeded generator).
type Logic func(r *rand.Rand, d *protocol.Delivery) []Emission

// Forward sends every delivered record to one partition of each sink.
func Forward(sinks ...string) Logic {
	return func(_ *rand.Rand, d *protocol.Delivery) []Emission {
		out := make([]Emission, 0, len(sinks))
		for _, s := range sinks {
			out = append(out, Emission{Topic: s, Partition: -1, Key: d.Key, Value: d.Value})
		}
		return out
	}
}

// Filter forwards a delivered record with probability keep, else sends
// nothing: the sinks go quiet while the node's commits keep writing markers.
func Filter(keep float64, sinks ...string) Logic {
	fw := Forward(sinks...)
	return func(r *rand.Rand, d *protocol.Delivery) []Emission {
		if r.Float64() >= keep {
			return nil
		}
		return fw(r, d)
	}
}

// Damped forwards a record only while its first value byte, a hop budget,
// is positive, decrementing it: a feedback cycle through Damped stages
// drains.
func Damped(sinks ...string) Logic {
	return func(_ *rand.Rand, d *protocol.Delivery) []Emission {
		if len(d.Value) == 0 || d.Value[0] == 0 {
			return nil
		}
		v := append([]byte{d.Value[0] - 1}, d.Value[1:]...)
		out := make([]Emission, 0, len(sinks))
		for _, s := range sinks {
			out = append(out, Emission{Topic: s, Partition: -1, Key: d.Key, Value: v})
		}
		return out
	}
}

// Sink consumes and sends nothing.
func Sink() Logic { return func(*rand.Rand, *protocol.Delivery) []Emission { return nil } }

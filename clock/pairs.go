package clock

import (
	"context"
	"fmt"
	"iter"

	"github.com/parsley-go/parsley/headers"
)

// The functions in this file serve Kafka client libraries whose header type
// is not shaped like headers.Header (IBM/sarama's has a []byte key, and a
// pointer slice on the consume side). They take a record's headers as an
// iterator of key/value pairs, in record order, and give the stamp back as
// one key and value, so an adapter converts nothing but its own loop.

// CheckReservedKeys returns a *headers.ReservedHeaderError, wrapping
// headers.ErrReservedHeader, for the first key in hs that is reserved for
// causal metadata (vc, vc-sender, vc-seq, or any parsley. prefix).
func CheckReservedKeys(hs iter.Seq2[string, []byte]) error {
	if hs == nil {
		return nil
	}
	for k := range hs {
		if headers.IsReserved(k) {
			return &headers.ReservedHeaderError{Key: k}
		}
	}
	return nil
}

// StampHeader returns the header that stamps a record bound for topic, for
// the caller to append after the record's own headers, own (nil if it has
// none). It is Clock.Stamp for any client library: it refuses own headers
// with reserved keys (an error wrapping headers.ErrReservedHeader) and an
// unknown topic (an *UnknownTopicError), and a stamp an open transaction
// forbids (an *OpenTxnError). The value is shared by every stamp until the
// clock next folds something and must not be modified.
func (c *Clock) StampHeader(ctx context.Context, topic string, own iter.Seq2[string, []byte]) (key string, value []byte, err error) {
	if err := CheckReservedKeys(own); err != nil {
		return "", nil, fmt.Errorf("clock: stamp record for topic %q: %w", topic, err)
	}
	return c.stampFor(ctx, topic)
}

// ObserveSeq folds a consumed record given by topic name, partition,
// offset and headers: Clock.Observe for any client library. Its errors are
// those of Observe.
func (c *Clock) ObserveSeq(ctx context.Context, topic string, partition int32, offset int64, hs iter.Seq2[string, []byte]) error {
	return ObserveHeaders(ctx, c, topic, partition, offset, collect(hs))
}

// ReadStampSeq decodes the whole causal metadata of a record's headers:
// its clock (either dialect, or their union) and its sender tag. Absent
// metadata reads as the empty, untagged stamp; present but undecodable
// metadata is an error wrapping headers.ErrUndecodable.
func ReadStampSeq(hs iter.Seq2[string, []byte]) (*headers.Stamp, error) {
	s := new(headers.Stamp)
	if err := headers.ReadStamp(s, collect(hs)); err != nil {
		return nil, err
	}
	return s, nil
}

func collect(hs iter.Seq2[string, []byte]) []headers.Header {
	if hs == nil {
		return nil
	}
	var out []headers.Header
	for k, v := range hs {
		out = append(out, headers.Header{Key: k, Value: v})
	}
	return out
}

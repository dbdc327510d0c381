package state

import (
	"context"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/internal/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Source is what a restore or a tail reads of one changelog partition:
// its topic's identity and settings, the partition's offsets, and its
// committed records. KafkaSource reads them from the brokers; a host
// simulator reads them from its model of a cluster, so the same Restore and
// Tailer run in both.
//
// A Source serves one goroutine: the restore's or the tail's.
type Source interface {
	// Topic and Partition name the changelog partition, for errors.
	Topic() string
	Partition() int32
	// Incarnation reads the changelog topic's current incarnation,
	// bypassing any cached metadata.
	Incarnation(ctx context.Context) (Incarnation, error)
	// Bounds lists the partition's last stable offset, high watermark and
	// log start.
	Bounds(ctx context.Context) (lso, hwm, start int64, err error)
	// DeleteRetention reads the topic's delete.retention.ms, or
	// DefaultDeleteRetention when the topic does not report it.
	DeleteRetention(ctx context.Context) (time.Duration, error)
	// Fetch reads, read_committed, once from pos on: the records at or
	// past pos in offset order, transaction markers included; the offset
	// past the last record read or left out as aborted (pos when nothing
	// was); and the high watermark the read reported (0 when nothing was
	// read). It never skips a gap silently: records below the log start
	// fail it. A Follower takes what it returns; the next Fetch may reuse
	// recs.
	Fetch(ctx context.Context, pos int64) (recs []Record, next, hwm int64, err error)
	// Await returns after a while, or with ctx's error: a restore that
	// found a transaction open on the partition asks again after it.
	Await(ctx context.Context) error
	// Close releases what the source holds; it may be called more than
	// once.
	Close()
}

// KafkaSource returns the Source of partition p of the changelog topic on
// the brokers admin talks to. newClient builds a plain (non-group) client
// from the options it is given; the source builds one at its first Fetch.
func KafkaSource(admin *kadm.Client, newClient func(...kgo.Opt) (*kgo.Client, error), topic string, p int32) Source {
	return &kafkaSource{admin: admin, newClient: newClient, topic: topic, partition: p, at: -1}
}

type kafkaSource struct {
	admin     *kadm.Client
	newClient func(...kgo.Opt) (*kgo.Client, error)
	topic     string
	partition int32
	cl        *kgo.Client
	at        int64 // where cl consumes from next; -1 before the first Fetch
	recs      []Record
}

func (s *kafkaSource) Topic() string    { return s.topic }
func (s *kafkaSource) Partition() int32 { return s.partition }

func (s *kafkaSource) Incarnation(ctx context.Context) (Incarnation, error) {
	return incarnation(ctx, s.admin, s.topic)
}

func (s *kafkaSource) Bounds(ctx context.Context) (lso, hwm, start int64, err error) {
	return bounds(ctx, s.admin, s.topic, s.partition)
}

func (s *kafkaSource) DeleteRetention(ctx context.Context) (time.Duration, error) {
	return deleteRetention(ctx, s.admin, s.topic)
}

func (s *kafkaSource) Fetch(ctx context.Context, pos int64) ([]Record, int64, int64, error) {
	if s.cl != nil && s.at != pos {
		// Asked for another position than the client's: start over there.
		s.cl.Close()
		s.cl = nil
	}
	if s.cl == nil {
		cl, err := s.newClient(
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {s.partition: kgo.NewOffset().At(pos)}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
			// Never skip silently to the log start: a gap fails the read,
			// and the next restore wipes.
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		)
		if err != nil {
			return nil, pos, 0, fmt.Errorf("state: read %s[%d]: %w", s.topic, s.partition, err)
		}
		s.cl = cl
	}
	recs, next, hwm, err := poll(ctx, s.cl, pos, reuse(s.recs))
	s.at, s.recs = next, recs
	return recs, next, hwm, err
}

func (s *kafkaSource) Await(ctx context.Context) error { return wait.Sleep(ctx, 50*time.Millisecond) }

func (s *kafkaSource) Close() {
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
}

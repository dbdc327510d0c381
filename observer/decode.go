package observer

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBadValue is wrapped when a stamp value given as text is neither hex
// nor base64.
var ErrBadValue = errors.New("stamp value is neither hex nor base64")

// DecodeValue decodes a stamp header value given as hex or base64 text.
// header names the header it came from (headers.HeaderVC or
// headers.HeaderCauses); "" tries vc, then parsley.causes, and returns the
// header that decoded.
func DecodeValue(text, header string) (*headers.Clock, string, error) {
	text = strings.TrimSpace(text)
	// Hex as the docs and hexdump print it: in groups separated by spaces.
	raw, err := hex.DecodeString(strings.Join(strings.Fields(strings.TrimPrefix(text, "0x")), ""))
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(text); err != nil {
			if raw, err = base64.URLEncoding.DecodeString(text); err != nil {
				return nil, "", fmt.Errorf("observer: decode %q: %w", abbrev(text), ErrBadValue)
			}
		}
	}
	switch header {
	case headers.HeaderVC:
		c, err := headers.DecodeVC(raw)
		return c, header, err
	case headers.HeaderCauses:
		c, err := headers.DecodeCauses(raw)
		return c, header, err
	case "":
		c, vcErr := headers.DecodeVC(raw)
		if vcErr == nil {
			return c, headers.HeaderVC, nil
		}
		c, causesErr := headers.DecodeCauses(raw)
		if causesErr == nil {
			return c, headers.HeaderCauses, nil
		}
		return nil, "", fmt.Errorf("observer: value decodes in neither dialect: %w", errors.Join(vcErr, causesErr))
	}
	return nil, "", fmt.Errorf("observer: unknown stamp header %q (want %s or %s)", header, headers.HeaderVC, headers.HeaderCauses)
}

func abbrev(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// WriteClock writes a clock's entries, one per line, naming topics through
// name (which may return "").
func WriteClock(w io.Writer, c *headers.Clock, name func(headers.TopicID) string) error {
	return writeClock(w, c, name, headers.SenderID.String)
}

// WriteClock writes a clock's entries as the package's WriteClock does,
// topics by name and senders by stage task where n knows them.
func (n Names) WriteClock(w io.Writer, c *headers.Clock) error {
	return writeClock(w, c, n.Topic, n.Sender)
}

func writeClock(w io.Writer, c *headers.Clock, name func(headers.TopicID) string, sender func(headers.SenderID) string) error {
	var b strings.Builder
	label := func(ch headers.Channel) string {
		if n := name(ch.Topic); n != "" {
			return fmt.Sprintf("%s/%d", n, ch.Partition)
		}
		return ch.String()
	}
	fmt.Fprintf(&b, "%d offset entries, %d sequence entries\n", c.NumOffsets(), c.NumSeqs())
	for e := range c.OffsetEntries() {
		fmt.Fprintf(&b, "  offset %s ≤ %d\n", label(e.Channel), e.Offset)
	}
	for e := range c.SeqEntries() {
		fmt.Fprintf(&b, "  seq    %s sender %s ≤ %d\n", label(e.Channel), sender(e.Sender), e.Seq)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FetchRecord reads the record at ref straight from the brokers, read
// committed. A marker or an offset no committed record occupies is an
// error wrapping ErrNotFound.
func FetchRecord(ctx context.Context, seeds []string, ref Ref, opts ...kgo.Opt) (*kgo.Record, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("observer: connect to %v: %w", seeds, err)
	}
	defer cl.Close()
	topic := ref.Topic
	if ref.ByID {
		tds, err := kadm.NewClient(cl).ListTopics(ctx)
		if err != nil {
			return nil, fmt.Errorf("observer: list topics: %w", err)
		}
		topic = ""
		for name, td := range tds {
			if headers.TopicID(td.ID) == ref.ID {
				topic = name
			}
		}
		if topic == "" {
			return nil, fmt.Errorf("observer: topic ID %s: %w", ref.ID, ErrNotFound)
		}
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("observer: list offsets of %q: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, ref.Partition)
	switch {
	case !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition):
		return nil, fmt.Errorf("observer: %s: no topic %q with partition %d: %w", ref, topic, ref.Partition, ErrNotFound)
	case end.Err != nil:
		return nil, fmt.Errorf("observer: list offsets of %q partition %d: %w", topic, ref.Partition, end.Err)
	case ref.Offset >= end.Offset:
		return nil, fmt.Errorf("observer: %s is at or past the last stable offset: %w", ref, ErrNotFound)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {ref.Partition: kgo.NewOffset().At(ref.Offset)}})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("observer: fetch %s: %w", ref, err)
		}
		var found *kgo.Record
		var past bool
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset == ref.Offset {
				found = r
			} else if r.Offset > ref.Offset {
				past = true
			}
		})
		if found != nil {
			return found, nil
		}
		if past {
			return nil, fmt.Errorf("observer: %s holds no committed record (a marker or an aborted record): %w", ref, ErrNotFound)
		}
	}
}

// ListNames returns the names of the cluster's topics, read from the
// brokers, for output that has no store to ask.
func ListNames(ctx context.Context, seeds []string, opts ...kgo.Opt) (Names, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return Names{}, fmt.Errorf("observer: connect to %v: %w", seeds, err)
	}
	defer cl.Close()
	tds, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return Names{}, fmt.Errorf("observer: list topics: %w", err)
	}
	byID := map[headers.TopicID]string{}
	parts := map[string]int32{}
	for name, td := range tds {
		byID[headers.TopicID(td.ID)] = name
		parts[name] = int32(len(td.Partitions))
	}
	return NamesOf(byID).WithSenders(SenderNamesOf(parts)), nil
}

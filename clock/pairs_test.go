package clock_test

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// fakeLookup answers from a fixed table and counts the questions asked.
type fakeLookup struct {
	ids   map[string]headers.TopicID
	err   error // returned for every topic when set
	calls atomic.Int32
}

func (f *fakeLookup) lookup(_ context.Context, topic string) (headers.TopicID, error) {
	f.calls.Add(1)
	if f.err != nil {
		return headers.TopicID{}, f.err
	}
	id, ok := f.ids[topic]
	if !ok {
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}
	return id, nil
}

// byteKeyHeader is shaped like sarama's RecordHeader: a []byte key, so it
// does not satisfy headers.HeaderLike.
type byteKeyHeader struct{ Key, Value []byte }

func pairs(hs []byteKeyHeader) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(string(h.Key), h.Value) {
				return
			}
		}
	}
}

var (
	ordersID   = headers.TopicID{1, 1}
	paymentsID = headers.TopicID{2, 2}
)

func TestClockRunsOnAPluggableLookup(t *testing.T) {
	ctx := testCtx(t)
	f := &fakeLookup{ids: map[string]headers.TopicID{"orders": ordersID, "payments": paymentsID}}
	clk := clock.New(nil, clock.TopicIDs(f.lookup))

	// A consumed order carrying a stamp of its own: the payment must claim
	// the order's coordinate and everything the order claimed.
	var carried headers.Clock
	carried.SetOffset(headers.Channel{Topic: paymentsID, Partition: 3}, 41)
	vc, err := headers.AppendVC(nil, &carried)
	if err != nil {
		t.Fatal(err)
	}
	in := []byteKeyHeader{{Key: []byte("trace"), Value: []byte("x")}, {Key: []byte(headers.HeaderVC), Value: vc}}
	if err := clk.ObserveSeq(ctx, "orders", 1, 7, pairs(in)); err != nil {
		t.Fatal(err)
	}
	key, value, err := clk.StampHeader(ctx, "payments", pairs([]byteKeyHeader{{Key: []byte("trace"), Value: []byte("y")}}))
	if err != nil {
		t.Fatal(err)
	}
	if key != headers.HeaderVC {
		t.Fatalf("stamp key %q, want %q", key, headers.HeaderVC)
	}
	st, err := clock.ReadStampSeq(pairs([]byteKeyHeader{{Key: []byte(key), Value: value}}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[headers.Channel]int64{
		{Topic: ordersID, Partition: 1}:   7,
		{Topic: paymentsID, Partition: 3}: 41,
	}
	got := map[headers.Channel]int64{}
	for e := range st.Clock.OffsetEntries() {
		got[e.Channel] = e.Offset
	}
	if len(got) != len(want) {
		t.Fatalf("stamp claims %v, want %v", got, want)
	}
	for ch, o := range want {
		if got[ch] != o {
			t.Fatalf("stamp claims %v, want %v", got, want)
		}
	}

	// Both topics were asked once; the cache answers after that, and
	// Forget sends the next lookup to the cluster again.
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
	if _, _, err := clk.StampHeader(ctx, "payments", nil); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d lookups after a cached stamp, want 2", n)
	}
	clk.Resolver().Forget("payments")
	if _, _, err := clk.StampHeader(ctx, "payments", nil); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("%d lookups after Forget, want 3", n)
	}
}

func TestPluggableLookupErrorsAreTyped(t *testing.T) {
	ctx := testCtx(t)
	clientErr := errors.New("client: UNKNOWN_TOPIC_OR_PARTITION")
	brokerDown := errors.New("broker down")
	for _, tc := range []struct {
		name    string
		lookup  clock.TopicIDLookup
		want    []error
		unknown bool
	}{
		{
			name:    "unknown topic",
			lookup:  (&fakeLookup{}).lookup,
			want:    []error{clock.ErrUnknownTopic},
			unknown: true,
		},
		{
			name: "client's unknown-topic error wrapped",
			lookup: func(context.Context, string) (headers.TopicID, error) {
				return headers.TopicID{}, errors.Join(clock.ErrUnknownTopic, clientErr)
			},
			want:    []error{clock.ErrUnknownTopic, clientErr},
			unknown: true,
		},
		{
			name:   "failed lookup",
			lookup: (&fakeLookup{err: brokerDown}).lookup,
			want:   []error{brokerDown},
		},
		{
			name: "zero ID",
			lookup: func(context.Context, string) (headers.TopicID, error) {
				return headers.TopicID{}, nil
			},
			want: []error{clock.ErrNoTopicID},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.New(nil, clock.TopicIDs(tc.lookup))
			_, _, err := clk.StampHeader(ctx, "payments", nil)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("StampHeader error %v does not wrap %v", err, w)
				}
			}
			var ute *clock.UnknownTopicError
			if got := errors.As(err, &ute); got != tc.unknown {
				t.Fatalf("error %v: is *UnknownTopicError = %v, want %v", err, got, tc.unknown)
			}
			if tc.unknown && ute.Topic != "payments" {
				t.Fatalf("unknown topic error names %q, want payments", ute.Topic)
			}
			if err := clk.ObserveSeq(ctx, "payments", 0, 1, nil); err == nil {
				t.Fatal("ObserveSeq folded a record whose topic did not resolve")
			}
			if !clk.Snapshot().IsEmpty() {
				t.Fatal("clock folded a record whose topic did not resolve")
			}
		})
	}
}

func TestPairPrimitivesFailClosed(t *testing.T) {
	ctx := testCtx(t)
	f := &fakeLookup{ids: map[string]headers.TopicID{"orders": ordersID}}
	clk := clock.New(nil, clock.TopicIDs(f.lookup))

	for _, key := range []string{headers.HeaderVC, headers.HeaderVCSender, headers.HeaderVCSeq, "parsley.anything"} {
		own := pairs([]byteKeyHeader{{Key: []byte("ok")}, {Key: []byte(key)}})
		if err := clock.CheckReservedKeys(own); !errors.Is(err, headers.ErrReservedHeader) {
			t.Fatalf("CheckReservedKeys(%q) = %v, want ErrReservedHeader", key, err)
		}
		if _, _, err := clk.StampHeader(ctx, "orders", own); !errors.Is(err, headers.ErrReservedHeader) {
			t.Fatalf("StampHeader with own header %q = %v, want ErrReservedHeader", key, err)
		}
	}
	if err := clock.CheckReservedKeys(pairs([]byteKeyHeader{{Key: []byte("vc2")}})); err != nil {
		t.Fatalf("CheckReservedKeys refused an unreserved key: %v", err)
	}

	bad := pairs([]byteKeyHeader{{Key: []byte(headers.HeaderVC), Value: []byte{9, 9}}})
	if err := clk.ObserveSeq(ctx, "orders", 0, 5, bad); !errors.Is(err, headers.ErrUndecodable) {
		t.Fatalf("ObserveSeq of an undecodable stamp = %v, want ErrUndecodable", err)
	}
	if _, err := clock.ReadStampSeq(bad); !errors.Is(err, headers.ErrUndecodable) {
		t.Fatalf("ReadStampSeq of an undecodable stamp = %v, want ErrUndecodable", err)
	}
	if err := clk.ObserveSeq(ctx, "orders", -1, 5, nil); !errors.Is(err, clock.ErrInvalidCoordinate) {
		t.Fatalf("ObserveSeq of partition -1 = %v, want ErrInvalidCoordinate", err)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatal("a refused record was folded")
	}
	st, err := clock.ReadStampSeq(nil)
	if err != nil || !st.Clock.IsEmpty() || st.Tagged {
		t.Fatalf("ReadStampSeq(nil) = %+v, %v; want the empty stamp", st, err)
	}
}

package headers

import (
	"errors"
	"testing"
)

// recordHeader stands in for another client library's header type, such as
// kgo.RecordHeader: same shape, different name.
type recordHeader struct {
	Key   string
	Value []byte
}

func vcValue(t *testing.T, c *Clock) []byte {
	t.Helper()
	b, err := EncodeVC(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func causesValue(t *testing.T, c *Clock) []byte {
	t.Helper()
	b, err := EncodeCauses(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadStamp(t *testing.T) {
	var vcClock, causesClock, union Clock
	vcClock.SetOffset(Channel{topicLow, 0}, 5)
	vcClock.SetSeq(Channel{topicLow, 1}, senderOne, 2)
	causesClock.SetOffset(Channel{topicLow, 0}, 9)
	causesClock.SetOffset(Channel{topicHigh, 3}, 1)
	union.CopyFrom(&vcClock)
	union.Merge(&causesClock)
	sender := AppendSender(nil, senderOne)
	seq := AppendSeq(nil, 12)

	cases := []struct {
		name       string
		hs         []Header
		wantClock  *Clock
		wantTagged bool
	}{
		{"no headers", nil, &Clock{}, false},
		{"only application headers", []Header{{"trace", []byte("x")}, {"parsley.other", nil}}, &Clock{}, false},
		{"vc only", []Header{{HeaderVC, vcValue(t, &vcClock)}}, &vcClock, false},
		{"vc tagged", []Header{{HeaderVCSeq, seq}, {"app", nil}, {HeaderVC, vcValue(t, &vcClock)}, {HeaderVCSender, sender}}, &vcClock, true},
		{"causes only", []Header{{HeaderCauses, causesValue(t, &causesClock)}}, &causesClock, false},
		{"both dialects read as their union", []Header{{HeaderCauses, causesValue(t, &causesClock)}, {HeaderVC, vcValue(t, &vcClock)}}, &union, false},
		{"tag without clock", []Header{{HeaderVCSender, sender}, {HeaderVCSeq, seq}}, &Clock{}, true},
	}
	var s Stamp
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Dirty the reused stamp first: ReadStamp must replace, not add.
			s.Clock.SetOffset(Channel{topicPool[3], 9}, 99)
			s.Tagged = true
			if err := ReadStamp(&s, tc.hs); err != nil {
				t.Fatal(err)
			}
			if !s.Clock.Equal(tc.wantClock) {
				t.Errorf("clock = %v %v, want %v %v", s.Clock.AppendOffsetEntries(nil), s.Clock.AppendSeqEntries(nil), tc.wantClock.AppendOffsetEntries(nil), tc.wantClock.AppendSeqEntries(nil))
			}
			if s.Tagged != tc.wantTagged {
				t.Errorf("Tagged = %v, want %v", s.Tagged, tc.wantTagged)
			}
			if s.Tagged && (s.Sender != senderOne || s.Seq != 12) {
				t.Errorf("tag = %v/%d", s.Sender, s.Seq)
			}
			// The same headers through another header type read the same.
			other := make([]recordHeader, len(tc.hs))
			for i, h := range tc.hs {
				other[i] = recordHeader(h)
			}
			var s2 Stamp
			if err := ReadStamp(&s2, other); err != nil || !s2.Clock.Equal(&s.Clock) {
				t.Errorf("reading through another header type: %v", err)
			}
		})
	}
}

func TestReadStampFailsClosed(t *testing.T) {
	var c Clock
	c.SetOffset(Channel{topicLow, 0}, 5)
	vc := vcValue(t, &c)
	causes := causesValue(t, &c)
	sender := AppendSender(nil, senderOne)
	seq := AppendSeq(nil, 1)
	cases := []struct {
		name string
		hs   []Header
		want string // header named in the error
	}{
		{"duplicate vc", []Header{{HeaderVC, vc}, {HeaderVC, vc}}, HeaderVC},
		{"duplicate causes", []Header{{HeaderCauses, causes}, {HeaderCauses, causes}}, HeaderCauses},
		{"duplicate vc-seq", []Header{{HeaderVCSender, sender}, {HeaderVCSeq, seq}, {HeaderVCSeq, seq}}, HeaderVCSeq},
		{"sender without seq", []Header{{HeaderVCSender, sender}}, HeaderVCSender},
		{"seq without sender", []Header{{HeaderVCSeq, seq}}, HeaderVCSeq},
		{"vc with nil value", []Header{{HeaderVC, nil}}, HeaderVC},
		{"causes with empty value", []Header{{HeaderCauses, []byte{}}}, HeaderCauses},
		{"causes malformed beside a good vc", []Header{{HeaderVC, vc}, {HeaderCauses, []byte{1}}}, HeaderCauses},
		{"short sender", []Header{{HeaderVCSender, sender[:15]}, {HeaderVCSeq, seq}}, HeaderVCSender},
		{"negative seq", []Header{{HeaderVCSender, sender}, {HeaderVCSeq, []byte{0xff, 0, 0, 0, 0, 0, 0, 0}}}, HeaderVCSeq},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s Stamp
			s.Clock.SetOffset(Channel{topicHigh, 0}, 1)
			err := ReadStamp(&s, tc.hs)
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("err = %v, want ErrUndecodable", err)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Header != tc.want {
				t.Errorf("err = %v, want a DecodeError naming %s", err, tc.want)
			}
			if !s.Clock.IsEmpty() || s.Tagged {
				t.Error("stamp not left empty after a failed read")
			}
		})
	}
}

func TestAppendStamp(t *testing.T) {
	var s Stamp
	s.Clock.SetOffset(Channel{topicLow, 0}, 5)
	s.Clock.SetOffset(Channel{topicHigh, 2}, 8)
	app := []recordHeader{{"trace", []byte("t")}}

	hs, err := AppendStamp(app, &s, DialectCauses)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Key != "trace" || hs[1].Key != HeaderCauses {
		t.Fatalf("headers = %v", hs)
	}
	var back Stamp
	if err := ReadStamp(&back, hs); err != nil || !back.Clock.Equal(&s.Clock) || back.Tagged {
		t.Fatalf("causes stamp read back as %v, %v", back.Clock.AppendOffsetEntries(nil), err)
	}

	s.Tagged, s.Sender, s.Seq = true, senderOne, 41
	s.Clock.SetSeq(Channel{topicLow, 1}, senderOne, 40)
	hs, err = AppendStamp(app[:1:1], &s, DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 4 || hs[1].Key != HeaderVC || hs[2].Key != HeaderVCSender || hs[3].Key != HeaderVCSeq {
		t.Fatalf("headers = %v", hs)
	}
	if err := ReadStamp(&back, hs); err != nil || !back.Clock.Equal(&s.Clock) || !back.Tagged || back.Sender != senderOne || back.Seq != 41 {
		t.Fatalf("vc stamp read back wrong: %v", err)
	}
	// Values must not alias: appending to one must not disturb the next.
	hs[1].Value = append(hs[1].Value, 0xee)
	if err := ReadStamp(&back, hs[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSender(hs[2].Value); err != nil {
		t.Fatal("sender value was overwritten through the vc value")
	}

	if _, err := AppendStamp([]Header(nil), &s, DialectCauses); !errors.Is(err, ErrUnencodable) {
		t.Errorf("tagged stamp in causes dialect: err = %v, want ErrUnencodable", err)
	}
	if _, err := AppendStamp([]Header(nil), &s, Dialect(9)); !errors.Is(err, ErrUnencodable) {
		t.Errorf("unknown dialect: err = %v", err)
	}
	s.Seq = -1
	if _, err := AppendStamp([]Header(nil), &s, DialectVC); !errors.Is(err, ErrUnencodable) {
		t.Errorf("negative seq: err = %v", err)
	}
}

func TestAppendStampRefusesReservedNames(t *testing.T) {
	for _, key := range []string{"vc", "vc-sender", "vc-seq", "parsley.causes", "parsley.", "parsley.mine"} {
		_, err := AppendStamp([]Header{{"ok", nil}, {key, []byte("x")}}, &Stamp{}, DialectVC)
		if !errors.Is(err, ErrReservedHeader) {
			t.Errorf("%q: err = %v, want ErrReservedHeader", key, err)
		}
		var re *ReservedHeaderError
		if !errors.As(err, &re) || re.Key != key {
			t.Errorf("%q: error does not name the header: %v", key, err)
		}
	}
	for _, key := range []string{"VC", "vc-other", "parsley", "Parsley.causes", "x-parsley."} {
		if IsReserved(key) {
			t.Errorf("IsReserved(%q) = true", key)
		}
	}
}

// TestAppendStampToSharesOneBuffer writes many stamps into one buffer and
// reads each back: every record's headers decode to its own stamp, no value
// can grow into its neighbour, and the bytes already in the buffer stay as
// they were, whether or not the buffer had to grow.
func TestAppendStampToSharesOneBuffer(t *testing.T) {
	for _, d := range []Dialect{DialectVC, DialectCauses} {
		buf := append(make([]byte, 0, 64), "prefix"...)
		var stamps []Stamp
		var recs [][]Header
		for i := range 40 {
			var s Stamp
			for j := range i % 5 {
				s.Clock.SetOffset(Channel{Topic: TopicID{byte(j + 1)}, Partition: int32(j)}, int64(i*10+j))
			}
			if d == DialectVC && i%2 == 0 {
				s.Clock.SetSeq(Channel{Topic: TopicID{9}}, SenderID{byte(i)}, int64(i))
				s.Tagged, s.Sender, s.Seq = true, SenderID{1, byte(i)}, int64(i)
			}
			hs, out, err := AppendStampTo([]Header{{Key: "app", Value: []byte("v")}}, buf, &s, d)
			if err != nil {
				t.Fatalf("%s stamp %d: %v", d, i, err)
			}
			for _, h := range hs[1:] {
				if cap(h.Value) != len(h.Value) {
					t.Fatalf("%s stamp %d: header %s has %d spare bytes: an append would overwrite the next value", d, i, h.Key, cap(h.Value)-len(h.Value))
				}
			}
			buf = out
			stamps, recs = append(stamps, s), append(recs, hs)
		}
		if string(buf[:6]) != "prefix" {
			t.Fatalf("%s: buffer prefix became %q", d, buf[:6])
		}
		for i, hs := range recs {
			var got Stamp
			if err := ReadStamp(&got, hs); err != nil {
				t.Fatalf("%s stamp %d: read back: %v", d, i, err)
			}
			want := &stamps[i]
			if !got.Clock.Equal(&want.Clock) || got.Tagged != want.Tagged || got.Sender != want.Sender || got.Seq != want.Seq {
				t.Fatalf("%s stamp %d: read back %+v, want %+v", d, i, got, *want)
			}
		}
	}
	// A refused stamp leaves the buffer as it was.
	buf := []byte("kept")
	s := Stamp{Tagged: true, Seq: -1}
	if _, out, err := AppendStampTo([]Header(nil), buf, &s, DialectVC); err == nil || string(out) != "kept" {
		t.Fatalf("negative sequence: err %v, buffer %q; want an error and the buffer unchanged", err, out)
	}
}

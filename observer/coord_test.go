package observer_test

import (
	"errors"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/observer"
)

func TestParseRef(t *testing.T) {
	id := "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	for _, tc := range []struct {
		in    string
		ok    bool
		topic string
		byID  bool
		part  int32
		off   int64
	}{
		{"orders/3@1207", true, "orders", false, 3, 1207},
		{"a.b_c-d/0@0", true, "a.b_c-d", false, 0, 0},
		{id + "/2@9", true, id, true, 2, 9},
		{"t/2147483647@9223372036854775807", true, "t", false, 2147483647, 9223372036854775807},
		{"t/2147483648@0", false, "", false, 0, 0},
		{"t/0@9223372036854775808", false, "", false, 0, 0},
		{"t/-1@0", false, "", false, 0, 0},
		{"t/0@-1", false, "", false, 0, 0},
		{"t/+1@0", false, "", false, 0, 0},
		{"t/01@0", false, "", false, 0, 0},
		{"t/0@", false, "", false, 0, 0},
		{"t/@1", false, "", false, 0, 0},
		{"/0@1", false, "", false, 0, 0},
		{"t0@1", false, "", false, 0, 0},
		{"t/0", false, "", false, 0, 0},
		{"a/b/0@1", false, "", false, 0, 0},
		{"t t/0@1", false, "", false, 0, 0},
		{"../0@1", false, "", false, 0, 0},
		{"00000000-0000-0000-0000-000000000000/0@1", false, "", false, 0, 0},
		{"", false, "", false, 0, 0},
	} {
		r, err := observer.ParseRef(tc.in)
		if !tc.ok {
			if !errors.Is(err, observer.ErrBadCoordinate) {
				t.Errorf("ParseRef(%q) = %+v, %v; want ErrBadCoordinate", tc.in, r, err)
			}
			continue
		}
		if err != nil || r.Topic != tc.topic || r.ByID != tc.byID || r.Partition != tc.part || r.Offset != tc.off {
			t.Errorf("ParseRef(%q) = %+v, %v", tc.in, r, err)
		}
		if r.String() != tc.in {
			t.Errorf("ParseRef(%q).String() = %q", tc.in, r.String())
		}
	}
}

// FuzzParseRef checks ParseRef never panics, fails only with
// ErrBadCoordinate, and accepts exactly what it prints back.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"orders/3@1207", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/2@9", "t/0@-1", "a/b/0@1", "@/", "t/00@0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := observer.ParseRef(s)
		if err != nil {
			if !errors.Is(err, observer.ErrBadCoordinate) {
				t.Fatalf("ParseRef(%q): error %v does not wrap ErrBadCoordinate", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRef(%q) round-trips to %q", s, r.String())
		}
		if r.Partition < 0 || r.Offset < 0 {
			t.Fatalf("ParseRef(%q) = %+v: negative", s, r)
		}
		if r.ByID {
			if r.ID.IsZero() || r.ID.String() != r.Topic && headers.TopicID(r.ID).String() != lower(r.Topic) {
				t.Fatalf("ParseRef(%q): ID %s does not match topic %q", s, r.ID, r.Topic)
			}
		}
	})
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// FuzzDecodeValue checks the decode command's parser never panics and
// fails only with ErrBadValue or headers.ErrUndecodable.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{"01000000000000000000", "0100", "AQAAAAA=", "zz", "0x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, _, err := observer.DecodeValue(s, "")
		if err != nil && !errors.Is(err, observer.ErrBadValue) && !errors.Is(err, headers.ErrUndecodable) {
			t.Fatalf("DecodeValue(%q): %v wraps neither ErrBadValue nor ErrUndecodable", s, err)
		}
		if err == nil && c == nil {
			t.Fatalf("DecodeValue(%q): nil clock without error", s)
		}
	})
}

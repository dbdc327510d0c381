package view_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/view"
)

func sampleToken() view.Token {
	c := new(headers.Clock)
	c.SetOffset(headers.Channel{Topic: headers.TopicID{1, 2, 3}, Partition: 2}, 41)
	c.SetOffset(headers.Channel{Topic: headers.TopicID{9}, Partition: 0}, 7)
	c.SetSeq(headers.Channel{Topic: headers.TopicID{9}, Partition: 1}, headers.SenderID{5}, 3)
	return view.TokenOf(c)
}

func TestTokenRoundTrip(t *testing.T) {
	for _, tok := range []view.Token{{}, sampleToken()} {
		s := tok.String()
		got, err := view.ParseToken(s)
		if err != nil {
			t.Fatalf("ParseToken(%q): %v", s, err)
		}
		if !got.Clock().Equal(tok.Clock()) || got.String() != s {
			t.Fatalf("round trip of %q gave %q", s, got.String())
		}
	}
}

func TestParseTokenRefuses(t *testing.T) {
	good := sampleToken().String()
	body := strings.TrimPrefix(good, "pt1.")
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	zeroTopic := new(headers.Clock)
	zeroTopic.SetOffset(headers.Channel{Partition: 1}, 3)
	zb, _ := headers.EncodeVC(zeroTopic)
	for _, tc := range []struct {
		name, text string
		decode     bool // the refusal carries a *headers.DecodeError
	}{
		{"empty", "", false},
		{"no prefix", body, false},
		{"other version", "pt2." + body, false},
		{"padding", good + "=", false},
		{"whitespace", good[:10] + " " + good[10:], false},
		{"std alphabet", "pt1." + base64.RawStdEncoding.EncodeToString(append(raw, 0xff, 0xfe)), false},
		{"truncated clock", "pt1." + base64.RawURLEncoding.EncodeToString(raw[:len(raw)-1]), true},
		{"trailing byte", "pt1." + base64.RawURLEncoding.EncodeToString(append(raw, 0)), true},
		{"unknown clock version", "pt1." + base64.RawURLEncoding.EncodeToString(append([]byte{99}, raw[1:]...)), true},
		{"too long", "pt1." + strings.Repeat("A", view.MaxTokenText), false},
		{"zero topic", "pt1." + base64.RawURLEncoding.EncodeToString(zb), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := view.ParseToken(tc.text)
			var te *view.TokenError
			if !errors.Is(err, view.ErrBadToken) || !errors.As(err, &te) {
				t.Fatalf("ParseToken = %v; want a *TokenError wrapping ErrBadToken", err)
			}
			var de *headers.DecodeError
			if tc.decode && !errors.As(err, &de) {
				t.Fatalf("ParseToken = %v; want it to carry the clock's *headers.DecodeError", err)
			}
		})
	}
}

// FuzzParseToken: ParseToken never panics, refuses with a typed error, and
// whatever it accepts is the one text of its token.
func FuzzParseToken(f *testing.F) {
	f.Add(sampleToken().String())
	f.Add(view.Token{}.String())
	f.Add("pt1.")
	f.Add("pt1.AQAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := view.ParseToken(s)
		if err != nil {
			if !errors.Is(err, view.ErrBadToken) {
				t.Fatalf("ParseToken(%q) = %v, not wrapping ErrBadToken", s, err)
			}
			return
		}
		if tok.String() != s {
			t.Fatalf("ParseToken(%q) accepted a text that is not its token's %q", s, tok.String())
		}
	})
}

// TokenFor names a record by topic name through a resolver: the token is
// TokenAt of its coordinate under the topic's ID.
func TestTokenFor(t *testing.T) {
	ctx := context.Background()
	r := clock.NewLookupResolver(func(_ context.Context, topic string) (headers.TopicID, error) {
		if topic == "orders" {
			return headers.TopicID{7}, nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}, 0)
	tok, err := view.TokenFor(ctx, r, "orders", 2, 40)
	if err != nil {
		t.Fatal(err)
	}
	want := view.TokenAt(headers.Coordinate{Channel: headers.Channel{Topic: headers.TopicID{7}, Partition: 2}, Offset: 40})
	if tok.String() != want.String() {
		t.Fatalf("TokenFor = %s; want %s", tok, want)
	}
	var ute *clock.UnknownTopicError
	if _, err := view.TokenFor(ctx, r, "gone", 0, 1); !errors.As(err, &ute) {
		t.Fatalf("TokenFor of an unknown topic: %v; want an *UnknownTopicError", err)
	}
	if _, err := view.TokenFor(ctx, r, "orders", 0, -1); !errors.Is(err, clock.ErrInvalidCoordinate) {
		t.Fatalf("TokenFor of offset -1: %v; want ErrInvalidCoordinate", err)
	}
}

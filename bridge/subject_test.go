package bridge

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl, topic string
		partition   int32
		key         []byte
		want        string
	}{
		{"kafka.{topic}.{partition}", "orders", 3, []byte("x"), "kafka.orders.3"},
		{"o.{key}", "orders", 0, []byte("order-17_A"), "o.order-17_A"},
		{"o.{key}", "orders", 0, []byte("a.b"), "o.~YS5i"},
		{"o.{key}", "orders", 0, []byte{}, "o.~"},
		{"o.{key}", "orders", 0, nil, "o.~~"},
		{"{topic}", "t", 0, nil, "t"},
	} {
		f, err := Template(tc.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f(tc.topic, tc.partition, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("%q(%q, %d, %q) = %q, %v; want %q", tc.tmpl, tc.topic, tc.partition, tc.key, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "a.{nope}", "a.{topic"} {
		if _, err := Template(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Template(%q) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// TestKeyTokenIsInjective: distinct keys never share a token, and every
// token is one valid subject token.
func TestKeyTokenIsInjective(t *testing.T) {
	keys := [][]byte{nil, {}, []byte("~"), []byte("a"), []byte("YQ"), []byte("~YQ"), []byte("a.b"), []byte("a b"), {0}, {0xff}, []byte("_"), []byte("-")}
	seen := make(map[string]string)
	for _, k := range keys {
		tok := KeyToken(k)
		desc := "nil"
		if k != nil {
			desc = string(k)
		}
		if prev, dup := seen[tok]; dup {
			t.Errorf("keys %q and %q share token %q", prev, desc, tok)
		}
		seen[tok] = desc
		if err := checkSubject("s." + tok); err != nil {
			t.Errorf("key %q: %v", desc, err)
		}
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"kafka.>", "kafka.a", true},
		{"kafka.>", "kafka.a.b", true},
		{"kafka.>", "kafka", false},
		{"kafka.*", "kafka.a", true},
		{"kafka.*", "kafka.a.b", false},
		{"kafka.*.x", "kafka.a.x", true},
		{"kafka.*.x", "kafka.a.y", false},
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{">", "anything.at.all", true},
	} {
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}

func TestCheckSubject(t *testing.T) {
	for s, ok := range map[string]bool{"a.b": true, "": false, "a..b": false, "a.*": false, "a.>": false, "a b": false, ".a": false, "a.": false} {
		if err := checkSubject(s); (err == nil) != ok {
			t.Errorf("checkSubject(%q) = %v", s, err)
		}
	}
}

// TestMessageHeaders: stamp headers travel in base64, text headers as they
// are, binary ones in base64 and named; names NATS cannot carry or that
// NATS and the bridge reserve are refused with the coordinate.
func TestMessageHeaders(t *testing.T) {
	coord := headers.Coordinate{Channel: headers.Channel{Topic: headers.TopicID{1}, Partition: 2}, Offset: 7}
	m := &stage.Message[[]byte, []byte]{
		Topic: "t", Partition: 2, Offset: 7, Coordinate: coord, Timestamp: time.UnixMilli(1234),
		Key: []byte("k"), Value: nil, ValueIsNil: true,
		Headers: []stage.Header{
			{Key: headers.HeaderVC, Value: []byte("abc")},
			{Key: "text", Value: []byte("héllo")},
			{Key: "ctl", Value: []byte("a\r\nb")},
			{Key: "pad", Value: []byte(" x")},
			{Key: "multi", Value: []byte("1")},
			{Key: "multi", Value: []byte("2")},
		},
	}
	msg, err := message("s", m)
	if err != nil {
		t.Fatal(err)
	}
	h := msg.Header
	for k, want := range map[string]string{
		HeaderMsgID: coord.String(), HeaderCoordinate: "t/2@7", HeaderTimestamp: "1234", HeaderKey: "aw==",
		HeaderTombstone: "true", headers.HeaderVC: "YWJj", "text": "héllo", "ctl": "YQ0KYg==", "pad": "IHg=",
		HeaderBase64Headers: "ctl,pad",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("header %q = %q, want %q", k, got, want)
		}
	}
	if got := h.Values("multi"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("multi = %q", got)
	}
	for _, bad := range []string{"Nats-Msg-Id", "parsley-key", "a:b", "a b", "é", ""} {
		m.Headers = []stage.Header{{Key: bad, Value: []byte("v")}}
		if _, err := message("s", m); !errors.Is(err, ErrHeader) {
			t.Errorf("header %q: %v, want ErrHeader", bad, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	subj, _ := Template("a.{topic}")
	good := Config{
		SinkConfig: SinkConfig{Subject: subj, NATSURL: "nats://127.0.0.1:1", Stream: "S"},
		Brokers:    []string{"127.0.0.1:1"}, ApplicationID: "g", InstanceID: "i", StateDir: t.TempDir(),
		Topics: []string{"t"},
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no topics":            func(c *Config) { c.Topics = nil },
		"no application ID":    func(c *Config) { c.ApplicationID = "" },
		"no instance":          func(c *Config) { c.InstanceID = "" },
		"no brokers":           func(c *Config) { c.Brokers = nil },
		"unknown publish mode": func(c *Config) { c.Publish = FastBatch + 1 },
		"no subject":           func(c *Config) { c.Subject = nil },
		"no url":               func(c *Config) { c.NATSURL = "" },
		"no stream":            func(c *Config) { c.Stream = "" },
		"horizon below txn tt": func(c *Config) { c.RedeliveryHorizon, c.TransactionTimeout = time.Second, time.Minute },
		"ack outlives txn":     func(c *Config) { c.AckTimeout, c.TransactionTimeout = 10*time.Second, 10*time.Second },
		// Unset, the transaction timeout is the stage's default (40s),
		// or what ClientOpts set: the checks hold against that.
		"horizon below default txn":     func(c *Config) { c.RedeliveryHorizon = 30 * time.Second },
		"ack outlives default txn":      func(c *Config) { c.AckTimeout = 40 * time.Second },
		"horizon below ClientOpts' txn": func(c *Config) { c.ClientOpts = []kgo.Opt{kgo.TransactionTimeout(3 * time.Minute)} },
	} {
		c := good
		mut(&c)
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// FuzzKeyToken: every key becomes one valid subject token, and the token
// decodes back to the key.
func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"", "a", "a.b", "~", "\x00\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		tok := KeyToken(key)
		if err := checkSubject("s." + tok); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		var back []byte
		switch {
		case tok == "~~":
			t.Fatalf("non-nil key %q got the nil token", key)
		case tok[0] == '~':
			var err error
			if back, err = base64.RawURLEncoding.DecodeString(tok[1:]); err != nil {
				t.Fatalf("key %q: token %q: %v", key, tok, err)
			}
		default:
			back = []byte(tok)
		}
		if !bytes.Equal(back, key) {
			t.Fatalf("key %q: token %q reads back as %q", key, tok, back)
		}
	})
}

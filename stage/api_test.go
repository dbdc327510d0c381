package stage

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/kafkahash"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCodecsRoundTrip(t *testing.T) {
	type point struct{ X, Y int }
	check := func(name string, enc func() ([]byte, error), dec func([]byte) (any, error), want any) {
		t.Run(name, func(t *testing.T) {
			b, err := enc()
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip = %v, want %v", got, want)
			}
		})
	}
	for _, s := range []string{"", "héllo", "\x00\xff"} {
		check("string "+s, func() ([]byte, error) { return String().Encode(s) },
			func(b []byte) (any, error) { return String().Decode(b) }, s)
	}
	for _, v := range []int64{0, -1, 1 << 62, -1 << 63} {
		check("int64", func() ([]byte, error) { return Int64().Encode(v) },
			func(b []byte) (any, error) { return Int64().Decode(b) }, v)
	}
	check("bytes", func() ([]byte, error) { return Bytes().Encode([]byte{1, 2}) },
		func(b []byte) (any, error) { return Bytes().Decode(b) }, []byte{1, 2})
	check("json", func() ([]byte, error) { return JSON[point]().Encode(point{1, -2}) },
		func(b []byte) (any, error) { return JSON[point]().Decode(b) }, point{1, -2})
}

func TestInt64MatchesKafkaLongSerializer(t *testing.T) {
	b, _ := Int64().Encode(258)
	if !bytes.Equal(b, []byte{0, 0, 0, 0, 0, 0, 1, 2}) {
		t.Fatalf("Int64(258) = % x, want big-endian eight bytes", b)
	}
}

func TestCodecsRefuseBadBytes(t *testing.T) {
	tests := []struct {
		name string
		dec  func([]byte) error
		in   []byte
	}{
		{"int64 short", func(b []byte) error { _, err := Int64().Decode(b); return err }, []byte{1, 2, 3}},
		{"int64 long", func(b []byte) error { _, err := Int64().Decode(b); return err }, make([]byte, 9)},
		{"json garbage", func(b []byte) error { _, err := JSON[map[string]int]().Decode(b); return err }, []byte("{")},
		{"json trailing", func(b []byte) error { _, err := JSON[int]().Decode(b); return err }, []byte("1 2")},
	}
	for _, tc := range tests {
		if err := tc.dec(tc.in); err == nil {
			t.Errorf("%s: decoded % x without error", tc.name, tc.in)
		}
	}
}

func FuzzInt64Codec(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Int64().Decode(b)
		if err != nil {
			return
		}
		enc, _ := Int64().Encode(v)
		if !bytes.Equal(enc, b) {
			t.Fatalf("Encode(Decode(% x)) = % x", b, enc)
		}
	})
}

func FuzzJSONCodec(f *testing.F) {
	f.Add([]byte(`{"Ordered":true,"Paid":3}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := JSON[account]()
		v, err := c.Decode(b)
		if err != nil {
			return
		}
		enc, err := c.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if v2, err := c.Decode(enc); err != nil || v2 != v {
			t.Fatalf("re-decode of %s = %v, %v; want %v", enc, v2, err, v)
		}
	})
}

// TestPartitionForMatchesKafka: keyed emissions land where Kafka's default
// partitioner (franz-go's StickyKeyPartitioner, which is Java's murmur2)
// puts them; nil keys go to the task's partition modulo the count.
func TestPartitionForMatchesKafka(t *testing.T) {
	part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 200 {
		key := []byte(strings.Repeat("k", i%13) + string(rune('a'+i%26)) + strings.Repeat("z", i/26))
		for _, n := range []int32{1, 3, 7, 16} {
			want := int32(part.Partition(&kgo.Record{Key: key}, int(n)))
			if got := partitionFor(key, false, n, 0); got != want {
				t.Fatalf("partitionFor(%q, %d) = %d, franz-go says %d", key, n, got, want)
			}
		}
	}
	if got := partitionFor(nil, true, 4, 6); got != 2 {
		t.Fatalf("nil key from task 6 over 4 partitions = %d, want 2", got)
	}
	if got := partitionFor([]byte{}, false, 4, 6); got == partitionFor(nil, true, 4, 6) && kafkahash.Partition(nil, 4) != 2 {
		t.Fatal("an empty key must hash, not take the nil-key rule")
	}
}

func TestEmissionsCompareAsValues(t *testing.T) {
	out := NewTopic("out", String(), Int64())
	a, b := out.Send("k", 1), out.Send("k", 1)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("equal emissions do not compare equal")
	}
	if reflect.DeepEqual(a, out.Send("k", 2)) || reflect.DeepEqual(a, out.Tombstone("k")) || reflect.DeepEqual(a, a.At(time.Unix(1, 0))) {
		t.Fatal("different emissions compare equal")
	}
	other := NewTopic("other", String(), Int64())
	if reflect.DeepEqual(a, other.Send("k", 1)) {
		t.Fatal("emissions to different topics compare equal")
	}
	if k, ok := out.SendUnkeyed(3).Key(); ok || k != nil {
		t.Fatal("SendUnkeyed has a key")
	}
	if _, ok := out.Tombstone("k").Value(); ok {
		t.Fatal("Tombstone has a value")
	}
}

func TestBuilderValidates(t *testing.T) {
	in := NewTopic("in", String(), String())
	in2 := NewTopic("in", String(), Int64())
	out := NewTopic("out", String(), String())
	h := func(Message[string, string]) ([]Emission, error) { return nil, nil }
	f := func(s int64, _ Message[string, string]) (Step[int64], error) { return Next(s), nil }
	fs := func(s string, _ Message[string, string]) (Step[string], error) { return Next(s), nil }
	tests := []struct {
		name  string
		build func() (*Stage, error)
		want  string // substring of the error; "" means valid
	}{
		{"valid stateless", func() (*Stage, error) { return On(Named("s"), in, h).Into(out).Build() }, ""},
		{"valid stateful without sinks", func() (*Stage, error) {
			return OnFold(WithState(Named("s"), Int64(), 0), in, f).Build()
		}, ""},
		{"empty name", func() (*Stage, error) { return On(Named(""), in, h).Into(out).Build() }, "empty name"},
		{"bad name", func() (*Stage, error) { return On(Named("a b"), in, h).Into(out).Build() }, "character"},
		{"no sources", func() (*Stage, error) { return Named("s").Into(out).Build() }, "no sources"},
		{"consumed twice", func() (*Stage, error) {
			return On(On(Named("s"), in, h), in, h).Into(out).Build()
		}, `"in" consumed twice`},
		{"consumed twice under two codecs", func() (*Stage, error) {
			return On(On(Named("s"), in, h), in2, func(Message[string, int64]) ([]Emission, error) { return nil, nil }).Into(out).Build()
		}, `"in" consumed twice`},
		{"no sinks, no state", func() (*Stage, error) { return On(Named("s"), in, h).Build() }, "no sinks"},
		{"sink twice", func() (*Stage, error) { return On(Named("s"), in, h).Into(out, out).Build() }, "declared twice"},
		{"nil handler", func() (*Stage, error) { return On[string, string](Named("s"), in, nil).Into(out).Build() }, "nil handler"},
		{"nil topic", func() (*Stage, error) { return On(Named("s"), (*Topic[string, string])(nil), h).Into(out).Build() }, "nil source"},
		{"fold without state", func() (*Stage, error) { return OnFold(Named("s"), in, f).Into(out).Build() }, "no state declared"},
		{"fold of another state type", func() (*Stage, error) {
			return OnFold(WithState(Named("s"), Int64(), 0), in, fs).Into(out).Build()
		}, "state type string"},
		{"state without fold", func() (*Stage, error) {
			return On(WithState(Named("s"), Int64(), 0), in, h).Into(out).Build()
		}, "no source folds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.build()
			if tc.want == "" {
				if err != nil || s == nil {
					t.Fatalf("Build() = %v, %v; want a stage", s, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidStage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build() error = %v; want ErrInvalidStage containing %q", err, tc.want)
			}
		})
	}
}

func TestFoldStepRules(t *testing.T) {
	in := NewTopic("in", String(), String())
	store := map[string][]byte{}
	io := mapState{m: store, key: "k"}
	run := func(st Step[*int64]) {
		t.Helper()
		s := WithState(Named("s"), JSON[*int64](), nil)
		OnFold(s, in, func(*int64, Message[string, string]) (Step[*int64], error) { return st, nil })
		built, err := s.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := built.sources[0].invoke(&rawMessage{topic: "in", key: []byte("k"), value: []byte("v")}, io); err != nil {
			t.Fatal(err)
		}
	}
	seven := int64(7)
	run(Next(&seven))
	if string(store["k"]) != "7" {
		t.Fatalf("stored %q, want 7", store["k"])
	}
	run(Keep[*int64]())
	if string(store["k"]) != "7" {
		t.Fatalf("Keep changed the state to %q", store["k"])
	}
	run(Next[*int64](nil))
	if _, ok := store["k"]; ok {
		t.Fatal("a nil next state did not delete")
	}
	run(Next(&seven))
	run(Drop[*int64]())
	if _, ok := store["k"]; ok {
		t.Fatal("Drop did not delete")
	}
}

type mapState struct {
	m   map[string][]byte
	key string
}

func (s mapState) load() ([]byte, bool, error) { v, ok := s.m[s.key]; return v, ok, nil }
func (s mapState) store(b []byte) error        { s.m[s.key] = b; return nil }
func (s mapState) del() error                  { delete(s.m, s.key); return nil }

func TestRecoveringFoldKeepsState(t *testing.T) {
	out := NewTopic("out", String(), String())
	f := RecoveringFold(func(s int64, m Message[string, string]) (Step[int64], error) {
		return Step[int64]{}, errors.New("no")
	}, func(s int64, m Message[string, string], err error) []Emission {
		return []Emission{out.Send(m.Key, err.Error())}
	})
	st, err := f(5, Message[string, string]{Key: "k"})
	if err != nil || !st.keep || !reflect.DeepEqual(st.Emissions, []Emission{out.Send("k", "no")}) {
		t.Fatalf("RecoveringFold = %+v, %v", st, err)
	}
}

func TestConfigValidates(t *testing.T) {
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("s"), in, func(Message[string, string]) ([]Emission, error) { return nil, nil }).Into(out).MustBuild()
	good := Config{ApplicationID: "app", InstanceID: "i1", Brokers: []string{"localhost:1"}, StateDir: t.TempDir()}
	tests := []struct {
		name   string
		mutate func(*Config)
		stages []*Stage
		want   string
	}{
		{"valid", func(*Config) {}, []*Stage{st}, ""},
		{"no app id", func(c *Config) { c.ApplicationID = "" }, []*Stage{st}, "ApplicationID"},
		{"app id names a parent directory", func(c *Config) { c.ApplicationID = ".." }, []*Stage{st}, "application's directory"},
		{"no instance", func(c *Config) { c.InstanceID = "" }, []*Stage{st}, "InstanceID"},
		{"no brokers", func(c *Config) { c.Brokers = nil }, []*Stage{st}, "Brokers"},
		{"no state dir", func(c *Config) { c.StateDir = "" }, []*Stage{st}, "StateDir"},
		{"no stages", func(*Config) {}, nil, "no stages"},
		{"nil stage", func(*Config) {}, []*Stage{nil}, "nil"},
		{"duplicate stage", func(*Config) {}, []*Stage{st, st}, "two stages"},
		{"read_uncommitted", func(c *Config) {
			c.ClientOpts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadUncommitted())}
		}, []*Stage{st}, "read_uncommitted"},
		{"no idempotence", func(c *Config) {
			c.ClientOpts = []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())}
		}, []*Stage{st}, "DisableIdempotentWrite"},
		{"own transactional ID", func(c *Config) { c.ClientOpts = []kgo.Opt{kgo.TransactionalID("x")} }, []*Stage{st}, "TransactionalID"},
		{"own group", func(c *Config) { c.ClientOpts = []kgo.Opt{kgo.ConsumerGroup("g")} }, []*Stage{st}, "ConsumerGroup"},
		{"harmless options", func(c *Config) {
			c.ClientOpts = []kgo.Opt{kgo.FetchMaxBytes(1 << 20), kgo.ClientID("x")}
		}, []*Stage{st}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			_, err := New(c, tc.stages...)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v; want ErrInvalidConfig containing %q", err, tc.want)
			}
		})
	}
}

// TestStartupChecksListEveryProblem: Run refuses a cluster that does not
// match the stages, naming every missing topic and every partition-count
// mismatch at once.
func TestStartupChecksListEveryProblem(t *testing.T) {
	e := newEnv(t,
		broker.Topic{Name: "a", Partitions: 2}, broker.Topic{Name: "b", Partitions: 3},
		broker.Topic{Name: "c", Partitions: 2}, broker.Topic{Name: "out"})
	h := func(Message[string, string]) ([]Emission, error) { return nil, nil }
	topic := func(n string) *Topic[string, string] { return NewTopic(n, String(), String()) }
	mismatched := On(On(Named("mismatched"), topic("a"), h), topic("b"), h).Into(topic("out")).MustBuild()
	wrongChangelog := On(Named("wrongcl"), topic("c"), h).Into(topic("out")).MustBuild()
	missing := On(Named("missing"), topic("nope"), h).Into(topic("gone")).MustBuild()
	e.changelogs(2, mismatched)
	e.changelogs(3, wrongChangelog)
	uncompacted := On(Named("uncompacted"), topic("c"), h).Into(topic("out")).MustBuild()
	if err := e.c.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(e.app, "uncompacted"), Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	// Compaction with deletion still lets retention drop state (#21).
	compactDelete := On(Named("compactdelete"), topic("c"), h).Into(topic("out")).MustBuild()
	if err := e.c.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(e.app, "compactdelete"), Partitions: 2, Configs: map[string]*string{"cleanup.policy": ptr("compact,delete")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := Run(ctx, e.config("i1"), mismatched, wrongChangelog, missing, uncompacted, compactDelete)
	if !errors.Is(err, ErrTopology) {
		t.Fatalf("Run = %v, want ErrTopology", err)
	}
	for _, want := range []string{`"nope"`, `"gone"`, `"app-missing-changelog"`, "a=2 b=3", `changelog "app-wrongcl-changelog" has 3 partitions`, `"app-uncompacted-changelog" has cleanup.policy=delete`,
		`"app-compactdelete-changelog" has cleanup.policy=compact,delete`, "set the topic's cleanup.policy to compact"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestCompactOnly(t *testing.T) {
	for policy, want := range map[string]bool{
		"compact": true, "compact,delete": false, "delete,compact": false,
		"delete": false, "": false, " compact ": true,
	} {
		if got := compactOnly(policy); got != want {
			t.Errorf("compactOnly(%q) = %v, want %v", policy, got, want)
		}
	}
}

package protocol

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// Store is the ordered key/value store a node keeps its state in. The host
// commits it atomically with the consumed offsets and the sends of the step
// that changed it (host duty H3); the node never commits anything itself.
// Calls are synchronous and local (memory, or a local database), so they
// take no context; only BrokerOffsets reaches the network.
//
// Reads must see the node's own earlier writes, committed or not. The node
// never modifies a slice it passed to Put or received from Get or Scan, and
// never keeps one it received past the call that returned it, except for a
// held record's bytes, which it hands out in a Delivery.
type Store interface {
	// Get returns the value stored under key; ok is false when there is none.
	Get(key string) (value []byte, ok bool, err error)
	// Put stores value under key, replacing any previous value. The store
	// may keep value; the node does not modify it afterwards.
	Put(key string, value []byte) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(key string) error
	// Scan calls fn for every key starting with prefix, in ascending
	// byte order of the key. An error from fn stops the scan and is returned.
	// fn must not modify the store.
	Scan(prefix string, fn func(key string, value []byte) error) error
}

// BrokerOffsets answers the broker offset questions a node asks: the end
// offsets of its sinks at init (where sequences start, whether former sinks
// still exist, and the fallback own-outputs claim of a host that reports no
// acknowledgements) and
// log-start offsets for truncation. It is the only way the node learns
// anything from the broker.
//
// An answer must be definitive: exists is false only when the topic ID
// names no topic on the cluster (a recreated topic has a new ID); a
// transient failure is an error, never a false absence.
type BrokerOffsets interface {
	// EndOffsets returns, indexed by partition, the offset the next record
	// appended to each partition of topic will get.
	EndOffsets(ctx context.Context, topic headers.TopicID) (ends []int64, exists bool, err error)
	// LogStarts returns, indexed by partition, the earliest offset still
	// held by each partition of topic.
	LogStarts(ctx context.Context, topic headers.TopicID) (starts []int64, exists bool, err error)
}

// MemStore is an in-memory Store with deterministic, sorted iteration. The
// zero value is empty and ready to use. It is meant for tests, simulators
// and examples; it is not safe for concurrent use.
type MemStore struct {
	m     map[string][]byte
	keys  []string // sorted; valid when !stale
	stale bool
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{} }

// Get implements Store.
func (s *MemStore) Get(key string) ([]byte, bool, error) {
	v, ok := s.m[key]
	return v, ok, nil
}

// Put implements Store. It keeps value.
func (s *MemStore) Put(key string, value []byte) error {
	if s.m == nil {
		s.m = make(map[string][]byte)
	}
	if _, ok := s.m[key]; !ok {
		s.stale = true
	}
	s.m[key] = value
	return nil
}

// Delete implements Store.
func (s *MemStore) Delete(key string) error {
	if _, ok := s.m[key]; ok {
		delete(s.m, key)
		s.stale = true
	}
	return nil
}

func (s *MemStore) sorted() []string {
	if s.stale || (s.keys == nil && len(s.m) > 0) {
		s.keys = s.keys[:0]
		for k := range s.m {
			s.keys = append(s.keys, k)
		}
		slices.Sort(s.keys)
		s.stale = false
	}
	return s.keys
}

// Scan implements Store.
func (s *MemStore) Scan(prefix string, fn func(key string, value []byte) error) error {
	keys := s.sorted()
	i := sort.SearchStrings(keys, prefix)
	for ; i < len(keys) && strings.HasPrefix(keys[i], prefix); i++ {
		if err := fn(keys[i], s.m[keys[i]]); err != nil {
			return err
		}
	}
	return nil
}

// Len returns the number of keys stored.
func (s *MemStore) Len() int { return len(s.m) }

// Entries returns every key and value in ascending key order: a snapshot
// two runs can compare byte for byte. The values are shared, not copied.
func (s *MemStore) Entries() []Mutation {
	keys := s.sorted()
	out := make([]Mutation, len(keys))
	for i, k := range keys {
		out[i] = Mutation{Key: k, Value: s.m[k]}
	}
	return out
}

// Clone returns an independent copy of s (values are shared; nothing
// modifies a stored value in place).
func (s *MemStore) Clone() *MemStore {
	c := &MemStore{m: make(map[string][]byte, len(s.m)), stale: true}
	for k, v := range s.m {
		c.m[k] = v
	}
	return c
}

// Mutation is one write of a step: a Put of Value under Key, or a Delete.
type Mutation struct {
	Key    string
	Value  []byte // nil for a Delete
	Delete bool
}

// Batch is a Store that stages writes over a base Store until Commit, so a
// host can apply a step's mutations atomically or drop them: the simulator
// discards a crashed step's batch; the stage runtime sends Mutations to its
// changelog and commits them to SQLite after the Kafka transaction commits.
// Reads see the staged writes. Only the last write per key is kept.
type Batch struct {
	base   Store
	writes map[string]Mutation
}

// NewBatch returns an empty batch over base.
func NewBatch(base Store) *Batch { return &Batch{base: base, writes: make(map[string]Mutation)} }

// Get implements Store.
func (b *Batch) Get(key string) ([]byte, bool, error) {
	if m, ok := b.writes[key]; ok {
		if m.Delete {
			return nil, false, nil
		}
		return m.Value, true, nil
	}
	return b.base.Get(key)
}

// Staged returns key's staged write, if the batch holds one: a Put's
// value is the slice Put kept, shared, not a copy.
func (b *Batch) Staged(key string) (Mutation, bool) {
	m, ok := b.writes[key]
	return m, ok
}

// Base returns the store b stages its writes over. Reading it directly
// after Staged has found no write costs one map lookup less than Get,
// which would repeat Staged's.
func (b *Batch) Base() Store { return b.base }

// Put implements Store.
func (b *Batch) Put(key string, value []byte) error {
	b.writes[key] = Mutation{Key: key, Value: value}
	return nil
}

// Delete implements Store.
func (b *Batch) Delete(key string) error {
	b.writes[key] = Mutation{Key: key, Delete: true}
	return nil
}

// Scan implements Store: the base's entries under prefix overlaid with the
// staged writes, in ascending key order.
func (b *Batch) Scan(prefix string, fn func(key string, value []byte) error) error {
	var staged []Mutation
	for k, m := range b.writes {
		if strings.HasPrefix(k, prefix) {
			staged = append(staged, m)
		}
	}
	slices.SortFunc(staged, func(x, y Mutation) int { return strings.Compare(x.Key, y.Key) })
	i := 0
	err := b.base.Scan(prefix, func(k string, v []byte) error {
		for i < len(staged) && staged[i].Key < k {
			if !staged[i].Delete {
				if err := fn(staged[i].Key, staged[i].Value); err != nil {
					return err
				}
			}
			i++
		}
		if i < len(staged) && staged[i].Key == k {
			m := staged[i]
			i++
			if m.Delete {
				return nil
			}
			return fn(k, m.Value)
		}
		return fn(k, v)
	})
	if err != nil {
		return err
	}
	for ; i < len(staged); i++ {
		if !staged[i].Delete {
			if err := fn(staged[i].Key, staged[i].Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// Mutations returns the staged writes in ascending key order.
func (b *Batch) Mutations() []Mutation {
	out := make([]Mutation, 0, len(b.writes))
	for _, m := range b.writes {
		out = append(out, m)
	}
	SortMutations(out)
	return out
}

// Commit applies the staged writes to the base in ascending key order and
// empties the batch. On error the batch keeps its writes and the base may
// hold some of them.
func (b *Batch) Commit() error {
	for _, m := range b.Mutations() {
		var err error
		if m.Delete {
			err = b.base.Delete(m.Key)
		} else {
			err = b.base.Put(m.Key, m.Value)
		}
		if err != nil {
			return err
		}
	}
	clear(b.writes)
	return nil
}

// Discard drops the staged writes.
func (b *Batch) Discard() { clear(b.writes) }

// Len returns how many keys have a staged write.
func (b *Batch) Len() int { return len(b.writes) }

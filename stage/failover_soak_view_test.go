package stage_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The failover soak's views (#33). Two views replicate the soak stage's
// changelog while its processes are killed with SIGKILL, restarted,
// rebalanced and replaced by standbys: one in memory, never restarted; one
// with a state directory whose Run is stopped and started again every few
// seconds. A writer per partition sends records of its own keys (keys the
// default partitioner puts on that partition, so the view finds their
// state in that task), takes the token of each acknowledged send and at
// once reads the key with GetAfter; readers read random keys with the
// writers' merged token and without a token. The judge:
//
//	(a) a GetAfter never returns a count below the number of the key's
//	    records the token names: the fold counts records per key, so the
//	    state that reflects every record of the token on the key's
//	    partition counts at least that many;
//	(b) every value read equals the key's state at a commit boundary of
//	    the committed changelog, read read_committed after the soak, at or
//	    between the replica's applied offsets before and after the read:
//	    the state some committed step wrote, and the one the view held;
//	(c) per view and key, a read that starts after another returned
//	    never returns less.
func init() { stage.FailoverSoakView = soakViews }

const soakViewKeysPerPartition = 2

// soakRead is one read a view answered.
type soakRead struct {
	view      int
	key       string
	partition int32
	lo, hi    int64 // the replica's applied offset before and after
	val       int64
}

type soakViewState struct {
	t     *testing.T
	cfg   stage.SoakView
	views []*view.View[string, int64]

	mu      sync.Mutex
	token   view.Token       // every acknowledged write's, merged
	written map[string]int64 // acknowledged writes per key, all named by token
	floor   []map[string]int64
	reads   []soakRead

	accepted, plain, timeouts, stale, back atomic.Int64
}

func soakViews(t *testing.T, cfg stage.SoakView) (stop, check func()) {
	s := &soakViewState{t: t, cfg: cfg, written: map[string]int64{}}
	runCtx, stopRuns := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	for i, dir := range []string{"", cfg.Dir} {
		v, err := view.New(view.Config{ApplicationID: cfg.App, Stage: cfg.Stage, Brokers: cfg.Brokers, StateDir: dir}, stage.String(), stage.Int64())
		if err != nil {
			t.Fatal(err)
		}
		s.views = append(s.views, v)
		s.floor = append(s.floor, map[string]int64{})
		runs.Add(1)
		go func() {
			defer runs.Done()
			if i == 0 {
				if err := v.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("view.Run: %v", err)
				}
				return
			}
			// The second view restarts from its files every 5s.
			for runCtx.Err() == nil {
				ctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
				err := v.Run(ctx)
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("view.Run (state dir): %v", err)
					return
				}
			}
		}()
	}

	for _, v := range s.views {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := v.WaitReady(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range int32(cfg.Partitions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.write(ctx, p)
		}()
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.readRandom(ctx, rand.New(rand.NewPCG(uint64(i), 33)))
		}()
	}
	stop = func() {
		cancel()
		wg.Wait()
	}
	check = func() {
		stopRuns()
		runs.Wait()
		s.judge()
	}
	return stop, check
}

// write sends records of partition p's keys in turn, one at a time; after
// each acknowledgement it reads the key with the send's token.
func (s *soakViewState) write(ctx context.Context, p int32) {
	cl, err := s.cfg.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		s.t.Error(err)
		return
	}
	defer cl.Close()
	keys := make([]string, soakViewKeysPerPartition)
	for i := range keys {
		keys[i] = s.cfg.Key(fmt.Sprintf("k%d-w%d", p, i), p, s.cfg.Partitions)
	}
	tok := view.Token{}
	for i := 0; ctx.Err() == nil; i++ {
		k := keys[i%len(keys)]
		r := &kgo.Record{Topic: "in", Partition: p, Key: []byte(k), Value: fmt.Appendf(nil, "w%d", i)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			s.t.Error(err)
			return
		}
		s.cfg.Produced([]*kgo.Record{r})
		tok = tok.Merge(view.TokenAt(headers.Coordinate{Channel: headers.Channel{Topic: s.cfg.Input, Partition: p}, Offset: r.Offset}))
		s.mu.Lock()
		s.written[k]++
		need := s.written[k]
		s.token = s.token.Merge(tok)
		s.mu.Unlock()
		s.read(i%len(s.views), k, tok, need)
		time.Sleep(10 * time.Millisecond)
	}
}

// readRandom reads random writer keys with the merged token of every
// acknowledged write, and without a token, until ctx ends.
func (s *soakViewState) readRandom(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		p := rng.Int32N(int32(s.cfg.Partitions))
		k := s.cfg.Key(fmt.Sprintf("k%d-w%d", p, rng.IntN(soakViewKeysPerPartition)), p, s.cfg.Partitions)
		s.mu.Lock()
		tok, need := s.token, s.written[k]
		s.mu.Unlock()
		vi := rng.IntN(len(s.views))
		s.read(vi, k, tok, need)
		s.read(vi, k, view.Token{}, 0)
		time.Sleep(5 * time.Millisecond)
	}
}

// read reads key k from view vi, with tok unless it is empty, and records
// the read; with a token the count must be at least need.
func (s *soakViewState) read(vi int, k string, tok view.Token, need int64) {
	v := s.views[vi]
	s.mu.Lock()
	floor := s.floor[vi][k]
	s.mu.Unlock()
	p := s.owner(k)
	lo := applied(v, p)
	var (
		n   int64
		err error
	)
	if tok.IsEmpty() {
		n, _, err = v.Get(k)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, _, err = v.GetAfter(ctx, tok, k)
		cancel()
	}
	hi := applied(v, p)
	switch {
	case err != nil && errors.Is(err, view.ErrNotYet):
		s.timeouts.Add(1)
		s.t.Errorf("view %d: GetAfter(%s): %v", vi, k, err)
		return
	case err != nil:
		s.t.Errorf("view %d: read %s: %v", vi, k, err)
		return
	}
	if tok.IsEmpty() {
		s.plain.Add(1)
	} else {
		s.accepted.Add(1)
		if n < need {
			s.stale.Add(1)
			s.t.Errorf("view %d: GetAfter(%s) = %d after a token naming %d of its records (stale)", vi, k, n, need)
		}
	}
	if n < floor {
		s.back.Add(1)
		s.t.Errorf("view %d: read %s = %d after a read returned %d (went back)", vi, k, n, floor)
	}
	s.mu.Lock()
	s.floor[vi][k] = max(s.floor[vi][k], n)
	s.reads = append(s.reads, soakRead{view: vi, key: k, partition: p, lo: lo, hi: hi, val: n})
	s.mu.Unlock()
}

func (s *soakViewState) owner(k string) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("in").Partition(&kgo.Record{Key: []byte(k)}, s.cfg.Partitions))
}

// applied returns the view's applied offset of partition p (-1 before Run
// listed it).
func applied(v *view.View[string, int64], p int32) int64 {
	for _, st := range v.Status() {
		if st.Partition == p {
			return st.Applied
		}
	}
	return -1
}

// committedStates returns, per partition of the changelog, the writer
// keys' states at every commit boundary: bounds[i] is the offset past the
// i-th control record, states[i] the keys' counts once every committed
// record below it is applied.
type committedStates struct {
	bounds []int64
	states []map[string]int64
}

func (s *soakViewState) committed(p int32) committedStates {
	topic := stage.ChangelogTopic(s.cfg.App, s.cfg.Stage)
	cl, err := s.cfg.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		s.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end := s.lastStableOffset(ctx, topic, p)
	cs := committedStates{bounds: []int64{0}, states: []map[string]int64{{}}}
	cur := map[string]int64{}
	var pending []*kgo.Record
	for next := int64(0); next < end; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			s.t.Fatalf("read %s[%d]: %v", topic, p, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				pending = append(pending, r)
				return
			}
			for _, m := range pending {
				k, isNil, ok := state.RecordKey(string(m.Key))
				if !ok || isNil {
					continue // not a keyed fold's state
				}
				if m.Value == nil {
					delete(cur, k)
					continue
				}
				n, err := stage.Int64().Decode(m.Value)
				if err != nil {
					s.t.Fatalf("%s[%d] offset %d: %v", topic, p, m.Offset, err)
				}
				cur[k] = n
			}
			pending = pending[:0]
			cs.bounds = append(cs.bounds, r.Offset+1)
			st := make(map[string]int64, len(cur))
			for k, n := range cur {
				st[k] = n
			}
			cs.states = append(cs.states, st)
		})
	}
	return cs
}

// lastStableOffset returns where p's committed records end: the soak
// has stopped every process, so no transaction is open.
func (s *soakViewState) lastStableOffset(ctx context.Context, topic string, p int32) int64 {
	cl, err := s.cfg.NewClient()
	if err != nil {
		s.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		s.t.Fatalf("end of %s[%d]: %v", topic, p, err)
	}
	end, ok := ends.Lookup(topic, p)
	if !ok {
		s.t.Fatalf("end of %s[%d]: not listed", topic, p)
	}
	return end.Offset
}

// judge checks every recorded read against the committed changelog.
func (s *soakViewState) judge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	byPart := map[int32]committedStates{}
	violations := 0
	for _, r := range s.reads {
		cs, ok := byPart[r.partition]
		if !ok {
			cs = s.committed(r.partition)
			byPart[r.partition] = cs
		}
		// The boundaries the replica may have been at during the read:
		// the last at or below lo, through every one up to hi.
		i, _ := slices.BinarySearch(cs.bounds, r.lo+1)
		i = max(i-1, 0)
		found := false
		for ; i < len(cs.bounds) && cs.bounds[i] <= r.hi; i++ {
			if cs.states[i][r.key] == r.val {
				found = true
				break
			}
		}
		if !found {
			violations++
			if violations <= 10 {
				s.t.Errorf("view %d: read %s = %d with the replica at %d..%d of partition %d: no committed step left that state there", r.view, r.key, r.val, r.lo, r.hi, r.partition)
			}
		}
	}
	s.t.Logf("views: %d token reads accepted (%d stale), %d reads without a token, %d timed out, %d went back; %d reads judged against the committed changelog, %d values no committed step left there",
		s.accepted.Load(), s.stale.Load(), s.plain.Load(), s.timeouts.Load(), s.back.Load(), len(s.reads), violations)
	for i, v := range s.views {
		s.t.Logf("view %d: %d keys", i, v.Len())
	}
}

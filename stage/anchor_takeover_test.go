package stage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// foreignOffsetTxn opens a transaction under transactional ID id that
// commits offset at for topic[0] in the application's group, as the
// partition's previous owner's step does, and leaves it open. end commits
// or aborts it.
func (e *env) foreignOffsetTxn(id, topic string, at int64) (end func(commit bool) error) {
	e.t.Helper()
	cl, err := e.c.NewClient()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = &id
	init.TransactionTimeoutMillis = 60_000
	ir, err := init.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ir.ErrorCode)
	}
	if err != nil {
		e.t.Fatalf("init producer ID: %v", err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = id, ir.ProducerID, ir.ProducerEpoch, e.app
	ar, err := add.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ar.ErrorCode)
	}
	if err != nil {
		e.t.Fatalf("add offsets to transaction: %v", err)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = id, e.app, ir.ProducerID, ir.ProducerEpoch
	commit.Generation, commit.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, e.topicID(topic)
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, at, -1
	rt.Partitions = append(rt.Partitions, rp)
	commit.Topics = append(commit.Topics, rt)
	cr, err := commit.RequestWith(ctx, cl)
	if err == nil {
		for _, t := range cr.Topics {
			for _, p := range t.Partitions {
				if err == nil {
					err = kerr.ErrorForCode(p.ErrorCode)
				}
			}
		}
	}
	if err != nil {
		e.t.Fatalf("transactional offset commit: %v", err)
	}
	return func(ok bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, ir.ProducerID, ir.ProducerEpoch, ok
		er, err := end.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(er.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("end transaction: %w", err)
		}
		return nil
	}
}

// TestAnchorNeverMovesTheGroupBack settles #29's suspicion, and it held:
// a takeover while the previous owner's transactional offset commit (9) is
// pending, on a partition the group has no stable commit for and whose log
// starts at 7. The new owner's client fetches its offsets with
// RequireStable and waits; meanwhile its idle tick steps commit, and the
// anchor gave them the position the task's build started from, 7, read
// without RequireStable. When the previous owner's commit landed while
// such a step was open, that step's End put the group back to 7: a crash
// then, and the next owner would process 7 and 8 a second time. The
// anchor's fallback now needs a stable read that the group has no commit
// and none pending.
func TestAnchorNeverMovesTheGroupBack(t *testing.T) {
	ticks := TickTopic("app", "s")
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"}, broker.Topic{Name: ticks})
	out := NewTopic("out", String(), String())
	bld := Named("s")
	On(bld, NewTopic("in", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	})
	bld.Ticks(20*time.Millisecond, func(Tick) ([]Emission, error) { return nil, nil })
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	for i := range 10 {
		e.produce(rec("in", 0, "k", fmt.Sprintf("v%d", i)))
	}
	// Below 7 is gone: a fresh store starts where the group's offsets
	// would, and nothing rewinds.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: "in", Partition: 0, At: 7})
	if resp, err := e.c.Admin().DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp)
	}
	const previous = 9 // the previous owner processed 7 and 8
	end := e.foreignOffsetTxn("previous-owner", "in", previous)

	a, err := New(e.config("i1"), st)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var after []int64 // in[0]'s committed offset after each commit since the previous owner's landed
	var landed, endErr error = nil, nil
	ended := false
	a.hooks.beforeEnd = func(step int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if step >= 3 && !ended { // idle steps have committed meanwhile
			// The previous owner's commit lands while this step is
			// open, before its End.
			ended = true
			endErr = end(true)
		}
		return false
	}
	a.hooks.afterCommit = func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs, err := e.c.Admin().FetchOffsets(ctx, e.app)
		if o, ok := offs.Lookup("in", 0); err == nil && ok && o.Err == nil {
			after = append(after, o.At)
		} else if landed == nil {
			landed = fmt.Errorf("fetch offsets: %v %v", err, o.Err)
		}
	}
	r := e.startApp(a)
	defer r.stop()
	waitFor(t, 30*time.Second, "ten steps after the previous owner's commit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(after) >= 10
	})
	got := values(e.readCommitted("out", 3, 3*time.Second))
	mu.Lock()
	defer mu.Unlock()
	if endErr != nil || landed != nil {
		t.Fatal(endErr, landed)
	}
	for _, at := range after {
		if at < previous {
			t.Fatalf("in[0]'s committed offset after the previous owner's commit of %d landed: %v", previous, after)
		}
	}
	if got[0] != "v9" {
		t.Errorf("outputs %q, want v9 only (offsets after the landing %v)", got, after)
	}
}

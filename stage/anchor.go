package stage

// Anchoring a transaction that consumed nothing to an offset commit.
//
// franz-go (v1.22) learns that the broker supports KIP-447 only from the
// answer to a TxnOffsetCommit. A transaction that commits without consumed
// offsets sends none, so GroupTransactSession.End takes the pre-KIP-447 path:
// it holds its rebalance lock for 500 ms in a goroutine after the commit,
// and End's own deferred reset waits for that lock, so End returns 500 ms
// late. The stage commits such transactions in two cases: a task's first
// build, whose initial state goes to the changelog before any record was
// consumed (every new application, bridge and benchmark run paid it once),
// and a step of an idle instance that emits only ticks or sweeps (a 50 ms
// tick interval gave 10 ticks in 3 s).
//
// Such a transaction therefore commits one offset anyway, one that changes
// nothing: of a partition an input of a task in the step, assigned to this
// member,
//
//   - the group's committed offset again, as the client knows it, when the
//     group has one: the client learned it from the offset fetch at
//     assignment or from its own commits since, and while the partition is
//     assigned here no other member commits it (the broker refuses a
//     transactional offset commit from another generation, and a
//     cooperative rebalance revokes a partition before it assigns it
//     elsewhere; a revoke during the step makes End abort);
//   - otherwise, when the group has no commit for the partition, neither
//     committed nor pending in another member's open transaction (a stable
//     read at the task's build: readUncommitted), and the client starts a
//     partition without a group offset at the log start (franz-go's default, which ClientOpts may change to
//     join at the log end), the offset the task's last build started the
//     input at, where the client consumes from. With no commit the group
//     resumes at the log start, and startPositions gave the log start then:
//     the commit names a position at or below the log start now, which is
//     where the group resumes (max of the commit and the log start) and
//     where startPositions starts every stage that reads the partition. The
//     task's committed state claims the same position (build reported it
//     to the node). A client told to start elsewhere commits nothing here,
//     and its first build pays the 500 ms.
//
// The offset rides the transaction: if it aborts, nothing was committed.
// With KIP-447 a member that takes the partition over while the
// transaction is open waits for it (RequireStable), and reads the same
// offset either way.
//
// The start positions are read without RequireStable (a build must not
// wait on another member's transaction), so they may predate a commit
// pending at the takeover, which the client is still waiting to read. An
// anchor from them, committed after that commit lands, moved the group's
// offset back, and the records between were processed twice (#29,
// TestAnchorNeverMovesTheGroupBack). Hence the stable read: a partition
// with a commit pending is not anchored by the fallback, and its step pays
// franz-go's 500 ms instead.

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetAnchor is the one offset an otherwise offsetless transaction
// commits.
type offsetAnchor struct {
	topicPartition
	at kgo.EpochOffset
}

// anchoredEnd returns the context for End of a step that commits: ctx
// itself when the client commits consumed offsets anyway, or when no
// partition qualifies; otherwise ctx with a TxnOffsetCommit hook that adds
// the anchor to the otherwise empty commit (and names every commit, as the
// session's hook does: fence.go).
func (a *App) anchoredEnd(ctx context.Context, cl *kgo.Client) context.Context {
	if len(cl.UncommittedOffsets()) > 0 {
		return ctx
	}
	anc, ok := a.offsetAnchor(cl.CommittedOffsets())
	if !ok {
		return ctx
	}
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		if len(req.Topics) == 0 {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = anc.topic
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = anc.partition
			rp.Offset = anc.at.Offset
			rp.LeaderEpoch = anc.at.Epoch
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		return a.nameCommits(req)
	})
}

// offsetAnchor picks the anchor among the inputs of the tasks in the step:
// the first one, in task and input order, whose partition the group has a
// commit for (committed: the client's view); failing that, the first one
// its task's last build gave a start. ok is false when none qualifies.
func (a *App) offsetAnchor(committed map[string]map[int32]kgo.EpochOffset) (anc offsetAnchor, ok bool) {
	_, assigned, _ := a.asg.read()
	var fresh *offsetAnchor
	for _, id := range a.sortedIDs() {
		t := a.tasks[id]
		if t.node == nil || a.restoring(id) {
			continue // not in the step
		}
		for i := range t.inputs {
			tp := topicPartition{t.inputTopic(i), t.partition}
			if !slices.Contains(assigned[tp.topic], tp.partition) {
				continue
			}
			if at, ok := committed[tp.topic][tp.partition]; ok {
				return offsetAnchor{tp, at}, true
			}
			if fresh == nil && a.freshAtLogStart && a.uncommitted[tp] && i < len(t.begin) && t.begin[i] >= 0 {
				fresh = &offsetAnchor{tp, kgo.EpochOffset{Epoch: -1, Offset: t.begin[i]}}
			}
		}
	}
	if fresh == nil {
		return offsetAnchor{}, false
	}
	return *fresh, true
}

// inputTopic names the task's i-th input: a source, in the stage's
// declaration order, or the tick topic after them.
func (t *task) inputTopic(i int) string {
	if i < len(t.st.sources) {
		return t.st.sources[i].topic
	}
	return t.tickTopic
}

// recordBegin keeps where the build started each input (starts: the step's
// start positions; -1 for an input without one), for offsetAnchor.
func (t *task) recordBegin(starts map[string]map[int32]int64) {
	t.begin = t.begin[:0]
	for i := range t.inputs {
		pos, ok := starts[t.inputTopic(i)][t.partition]
		if !ok {
			pos = -1
		}
		t.begin = append(t.begin, pos)
	}
}

// readUncommitted reads, with RequireStable, which of the partitions in
// need the group has no commit for, committed or pending, and records the
// answer for offsetAnchor. The broker answers a partition with a pending
// commit UNSTABLE_OFFSET_COMMIT at once; that counts as committed. A
// failed read records every partition as committed: the fallback only
// spares a delay, so it needs certainty.
func (a *App) readUncommitted(ctx context.Context, need map[string][]int32) {
	found := make(map[topicPartition]bool)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = true
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = a.cfg.ApplicationID
	for _, topic := range slices.Sorted(maps.Keys(need)) {
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.TopicID = topic, a.topics[topic].id
		rt.Partitions = need[topic]
		g.Topics = append(g.Topics, rt)
		for _, p := range need[topic] {
			found[topicPartition{topic, p}] = false
		}
	}
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, a.boot)
	if err == nil && len(resp.Groups) == 1 && resp.Groups[0].ErrorCode == 0 {
		for _, rt := range resp.Groups[0].Topics {
			topic := rt.Topic
			if name, ok := a.idName[rt.TopicID]; ok {
				topic = name
			}
			for _, rp := range rt.Partitions {
				tp := topicPartition{topic, rp.Partition}
				if _, asked := found[tp]; asked {
					found[tp] = rp.ErrorCode == 0 && rp.Offset < 0
				}
			}
		}
	} else {
		if err == nil && len(resp.Groups) == 1 {
			err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
		}
		a.log.Debug("stage: stable offset read failed; no anchor from start positions", "err", err)
	}
	if a.uncommitted == nil {
		a.uncommitted = make(map[topicPartition]bool)
	}
	maps.Copy(a.uncommitted, found)
}

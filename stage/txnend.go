package stage

// Ending the session's transactions, and everything franz-go's
// GroupTransactSession.End asks of its caller to end them promptly and
// safely (its KIP-447 handling).
//
// franz-go (v1.22) learns that the broker supports KIP-447 only from the
// answer to a TxnOffsetCommit. A transaction that commits without consumed
// offsets sends none, so GroupTransactSession.End takes the pre-KIP-447 path:
// it holds its rebalance lock for 500 ms in a goroutine after the commit,
// and End's own deferred reset waits for that lock, so End returns 500 ms
// late. The stage would commit such transactions in three cases, and
// spares the wait in each:
//
//   - a step that consumed and wrote nothing (building restored tasks that
//     deliver nothing) leaves Kafka as it found it: its abort is its
//     commit, and it ends as an abort (end);
//   - a task's first build, whose initial state goes to the changelog
//     before any record was consumed (every new application, bridge and
//     benchmark run paid it once), and a step of an idle instance that
//     emits only ticks or sweeps (a 50 ms tick interval gave 10 ticks in
//     3 s): the commit is anchored to an offset (below).
//
// GroupTransactSession also passes on only the first revoke between two
// ends of a transaction: End re-arms its revoke callback. An idle instance
// that ends none would never hear of the next revoke (a partition number
// leaving in the second round of a cooperative rebalance) and keep running
// a task assigned elsewhere; after a revoke, the idle loop ends an empty
// transaction (rearmRevoke).
//
// # The anchor
//
// An otherwise offsetless transaction commits one offset anyway, one that changes
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
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// txnEnder ends the session's transactions: a step's (end) and the empty
// one an idle loop ends after a revoke (rearmRevoke). It is owned by the
// session loop, which alone calls its methods; of the App it reads only
// the ownership, through that type's locked methods. It is built at Run,
// once the startup checks have resolved the topics.
type txnEnder struct {
	group   string // Config.ApplicationID: the consumer group
	log     *slog.Logger
	cluster cluster // for the stable offset read
	own     *ownership
	// freshAtLogStart: the client starts a partition without a group
	// offset at its log start (ClientOpts keep franz-go's default), so an
	// offsetless step may commit that.
	freshAtLogStart bool
	// uncommitted: the source partitions the last stable offset read
	// found with no group commit, committed or pending.
	uncommitted map[topicPartition]bool

	sab sabotageSet // empty outside verification builds (sabotage.go)
}

// end ends the step's transaction, committing it when commit is set.
// empty: the step consumed and produced nothing; it ends as an abort,
// which counts as its commit (and rewinds the client to the group's
// offsets, as any abort does). A commit of a step that consumed nothing
// is anchored; when no anchor qualifies, the commit would carry no offset
// (franz-go then sends no offset commit, and the coordinator checks
// nothing), so the member asks the coordinator first whether it is still
// in its generation, and aborts if not. After that answer the member's
// sends are already in the log: a member given its tasks later restores
// behind this transaction, whatever it ends as. inStep returns the tasks
// in the step, in task order. It returns whether the step committed.
func (e *txnEnder) end(ctx context.Context, sess groupSession, commit, empty bool, inStep func() []*task) (bool, error) {
	e.own.takeRevoked() // End re-arms the session's revoke callback
	if commit && empty {
		_, err := sess.End(ctx, false, nil)
		return err == nil, err
	}
	var anchor *offsetAnchor
	if commit && len(sess.UncommittedOffsets()) == 0 {
		if anc, ok := e.offsetAnchor(sess.CommittedOffsets(), inStep()); ok {
			anchor = &anc
		} else if err := sess.CheckMember(ctx); err != nil && !e.sab.has(sabCommitUnheld) {
			// Nothing in the commit lets the coordinator check the
			// member, and it says the member is out of its generation.
			e.log.Info("stage: step aborted: the group no longer counts this member", "err", err)
			commit = false
		}
	}
	return sess.End(ctx, commit, anchor)
}

// rearmRevoke ends an empty transaction after a revoke while the loop is
// idle, so that the session hears of the next one. ended reports whether
// it did: the abort rewound the client to the committed offsets.
//
// The task set does not depend on hearing it: the ownership takes every
// change from the group's syncs. An idle session that heard a revoke and
// ended no transaction would abort its next step for it.
func (e *txnEnder) rearmRevoke(ctx context.Context, sess groupSession) (ended bool, err error) {
	if !e.own.takeRevoked() {
		return false, nil
	}
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("stage: begin transaction: %w", err)
	}
	if _, err := sess.End(ctx, false, nil); err != nil {
		return false, fmt.Errorf("stage: end empty transaction: %w", err)
	}
	return true, nil
}

// offsetAnchor is the one offset an otherwise offsetless transaction
// commits.
type offsetAnchor struct {
	topicPartition
	at kgo.EpochOffset
}

// offsetAnchor picks the anchor among the inputs of the tasks in the step
// (inStep, in task order): the first one, in task and input order, whose
// partition the group has a commit for (committed: the client's view);
// failing that, the first one its task's last build gave a start. ok is
// false when none qualifies.
func (e *txnEnder) offsetAnchor(committed map[string]map[int32]kgo.EpochOffset, inStep []*task) (anc offsetAnchor, ok bool) {
	assigned := e.own.assigned()
	var fresh *offsetAnchor
	for _, t := range inStep {
		if t.node == nil {
			continue // not built: its build failed
		}
		for i := range t.inputs {
			tp := topicPartition{t.inputTopic(i), t.partition}
			if !slices.Contains(assigned[tp.topic], tp.partition) {
				continue
			}
			if at, ok := committed[tp.topic][tp.partition]; ok {
				return offsetAnchor{tp, at}, true
			}
			if fresh == nil && e.freshAtLogStart && e.uncommitted[tp] && i < len(t.begin) && t.begin[i] >= 0 {
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
// spares a delay, so it needs certainty. It reads nothing when the client
// does not start fresh partitions at the log start: the fallback is off.
func (e *txnEnder) readUncommitted(ctx context.Context, need map[string][]int32) {
	if !e.freshAtLogStart {
		return
	}
	found, err := e.cluster.uncommitted(ctx, e.group, need)
	if err != nil {
		e.log.Debug("stage: stable offset read failed; no anchor from start positions", "err", err)
		found = make(map[topicPartition]bool)
		for t, ps := range need {
			for _, p := range ps {
				found[topicPartition{t, p}] = false
			}
		}
	}
	maps.Copy(e.uncommitted, found)
}

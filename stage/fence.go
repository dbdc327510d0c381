package stage

// Fencing a task's previous owner when it is gone, so a takeover does not
// wait for the broker to time its transaction out.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/internal/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An instance killed in the middle of a step leaves its transaction open.
// Until it ends, the last stable offset of every partition it wrote stays
// put: its output partitions, whose read_committed readers see nothing past
// it, whichever task wrote the later records (tasks that never moved
// stall); the changelog partitions of its tasks, which the new owner must
// read to the end before it runs them; and its offset commits, which keep
// the client's offset fetch for the new owner answering
// UNSTABLE_OFFSET_COMMIT (it retries after a fixed second). Kafka aborts
// the transaction only once the transaction timeout has passed and its
// coordinator's periodic check
// (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default) notices, or when the same transactional ID initializes again:
// on Kafka a failover took 7–9 s where the session timeout was 3 s.
//
// The new owner of a task therefore ends it as soon as the task's
// partitions are assigned, before the client fetches their offsets. The
// previous owner is named by the committed offsets of the partitions (every
// stage transaction commits its offsets with its instance ID as metadata,
// nameCommits) and by any transaction still open on the task's changelog
// partitions (only a task's owner writes those). An owner that is no
// longer a member of the group has lost its tasks and may not commit;
// initializing its transactional ID with the open transaction's producer
// ID and epoch (KIP-360) makes the coordinator abort it at once and fences
// the process if it still runs. An owner still in the group handed the
// task over by a cooperative revoke and ends its own transaction; it is
// left alone. Fencing is an optimization: when it fails, the takeover
// waits for the broker as before.

// fenceTimeout bounds fenceAbandoned, which delays the client's offset
// fetch for the partitions just assigned.
const fenceTimeout = 5 * time.Second

// nameCommits sets the metadata of every offset a stage transaction
// commits to the instance ID, so that the next owner of a partition knows
// whose transaction may still be open on it.
func nameCommits(req *kmsg.TxnOffsetCommitRequest, instance string) {
	for i := range req.Topics {
		for j := range req.Topics[i].Partitions {
			req.Topics[i].Partitions[j].Metadata = &instance
		}
	}
}

// departed returns, sorted, the instances of candidates that are neither
// self nor among members (the group's instance IDs).
func departed(candidates map[string]bool, self string, members []string) []string {
	var out []string
	for inst := range candidates {
		if inst != "" && inst != self && !slices.Contains(members, inst) {
			out = append(out, inst)
		}
	}
	slices.Sort(out)
	return out
}

// fenceAbandoned aborts the transactions that the previous owners of the
// source partitions just added to this member left open, when those owners
// are no longer in the group. It runs in the assignment callback, before
// the client fetches the partitions' offsets; a failure is logged, and the
// takeover then waits for the broker to end the transaction.
func (c *kafkaCluster) fenceAbandoned(ctx context.Context, added map[string][]int32) {
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	aborted, err := c.fenceAbandonedTxns(ctx, added)
	for _, id := range aborted {
		c.log.Info("stage: aborted the transaction a departed instance left open", "transactional_id", id)
	}
	if err != nil {
		c.log.Warn("stage: could not end a departed instance's open transaction; the takeover waits for the broker to time it out",
			"partitions", added, "err", err)
	}
}

// fenceAbandonedTxns returns the transactional IDs whose open transaction
// it aborted.
func (c *kafkaCluster) fenceAbandonedTxns(ctx context.Context, added map[string][]int32) ([]string, error) {
	app := c.appID
	owners := make(map[string]bool)
	var errs []error
	// Not RequireStable: the fetch should answer with the last committed
	// offsets' metadata, not wait for the transaction in question.
	committed, err := c.Client.FetchOffsets(ctx, app)
	if err != nil {
		errs = append(errs, fmt.Errorf("fetch committed offsets: %w", err))
	}
	changelogs := make(kadm.TopicsSet)
	for t, ps := range added {
		for _, p := range ps {
			if o, ok := committed.Lookup(t, p); ok && o.Err == nil {
				owners[o.Metadata] = true
			}
		}
		for _, si := range c.bySource[t] {
			changelogs.Add(ChangelogTopic(app, c.stages[si].name), ps...)
		}
	}
	open, err := c.openOnChangelogs(ctx, changelogs)
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range open {
		if inst, ok := strings.CutPrefix(id, app+"-"); ok {
			owners[inst] = true
		}
	}
	if len(departed(owners, c.instance, nil)) == 0 {
		return nil, errors.Join(errs...) // the usual case: nobody else to ask about
	}
	// Membership is read after the candidates: an instance that restarted
	// and joined before this read initialized its transactional ID first,
	// which ended the transaction in question. One that restarts, joins
	// and begins a step in the milliseconds between this read and the
	// fence loses that step to the fence (Kafka aborts an open transaction
	// of the same producer ID whatever the epoch named) and starts its
	// session over; exactly-once holds either way.
	groups, err := c.Client.DescribeGroups(ctx, app)
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("describe group %q: %w", app, err))...)
	}
	var members []string
	for _, m := range groups[app].Members {
		if m.InstanceID != nil {
			members = append(members, *m.InstanceID)
		}
	}
	gone := departed(owners, c.instance, members)
	if len(gone) == 0 {
		return nil, errors.Join(errs...)
	}
	ids := make([]string, len(gone))
	for i, inst := range gone {
		ids[i] = app + "-" + inst // session.go: the instance's transactional ID
	}
	txns, err := c.Client.DescribeTransactions(ctx, ids...)
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("describe transactions %v: %w", ids, err))...)
	}
	var aborted []string
	for _, d := range txns.Sorted() {
		// A transactional ID never used (an offset's metadata written
		// by an older version) is not found: nothing to end.
		if d.Err != nil || d.State != "Ongoing" {
			continue
		}
		ok, err := c.fence(ctx, d)
		if err == nil && ok {
			err = c.awaitEnd(ctx, d.TxnID)
		}
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			aborted = append(aborted, d.TxnID)
		}
	}
	return aborted, errors.Join(errs...)
}

// awaitEnd waits until the coordinator has written the abort's markers,
// polling: until then the client's offset fetch still finds the offsets
// pending, and it would retry only a second later.
func (c *kafkaCluster) awaitEnd(ctx context.Context, txnID string) error {
	for {
		txns, err := c.Client.DescribeTransactions(ctx, txnID)
		if err != nil {
			return fmt.Errorf("describe transaction %s: %w", txnID, err)
		}
		d, ok := txns[txnID]
		if !ok {
			return fmt.Errorf("describe transaction %s: not in the answer", txnID)
		}
		if d.Err != nil {
			return fmt.Errorf("describe transaction %s: %w", txnID, d.Err)
		}
		switch d.State {
		case "Ongoing", "PrepareAbort", "PrepareCommit", "PrepareEpochFence":
		default:
			return nil
		}
		if err := wait.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("transaction %s still %s: %w", txnID, d.State, err)
		}
	}
}

// openOnChangelogs returns the transactional IDs with a transaction open
// on one of changelogs.
func (c *kafkaCluster) openOnChangelogs(ctx context.Context, changelogs kadm.TopicsSet) ([]string, error) {
	if len(changelogs) == 0 {
		return nil, nil
	}
	described, err := c.Client.DescribeProducers(ctx, changelogs)
	if err != nil {
		return nil, fmt.Errorf("describe producers: %w", err)
	}
	var pids []int64
	var errs []error // a partition that cannot be described does not stop the others
	for _, d := range described.SortedPartitions() {
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("describe producers of %s[%d]: %w", d.Topic, d.Partition, d.Err))
			continue
		}
		d.ActiveProducers.Each(func(ap kadm.DescribedProducer) {
			if ap.CurrentTxnStartOffset >= 0 && !slices.Contains(pids, ap.ProducerID) {
				pids = append(pids, ap.ProducerID)
			}
		})
	}
	if len(pids) == 0 {
		return nil, errors.Join(errs...)
	}
	listed, err := c.Client.ListTransactions(ctx, pids, []string{"Ongoing"})
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("list transactions of producers %v: %w", pids, err))...)
	}
	var ids []string
	for _, l := range listed.Sorted() {
		if l.State == "Ongoing" && slices.Contains(pids, l.ProducerID) {
			ids = append(ids, l.TxnID)
		}
	}
	return ids, errors.Join(errs...)
}

// fence initializes d's transactional ID with the producer ID and epoch of
// its open transaction, which makes the coordinator abort the transaction
// and bump the epoch. It reports whether this call began the abort; an
// answer that the producer has moved on (the instance restarted, or another
// member fenced it first) leaves nothing to do.
func (c *kafkaCluster) fence(ctx context.Context, d kadm.DescribedTransaction) (bool, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(d.TxnID)
	req.TransactionTimeoutMillis = d.TimeoutMillis
	req.ProducerID = d.ProducerID
	req.ProducerEpoch = d.ProducerEpoch
	resp, err := req.RequestWith(ctx, c.boot)
	if err != nil {
		return false, fmt.Errorf("fence %s: %w", d.TxnID, err)
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil, // the broker ended it at once (kfake)
		errors.Is(err, kerr.ConcurrentTransactions): // the abort began
		return true, nil
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return false, nil
	default:
		return false, fmt.Errorf("fence %s (producer %d epoch %d): %w", d.TxnID, d.ProducerID, d.ProducerEpoch, err)
	}
}

package stage

// Fencing a task's previous owner when it is gone, so a takeover does not
// wait for the broker to time its transaction out.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An instance killed in the middle of a step leaves its transaction open.
// Until it ends, the last stable offset of every partition it wrote stays
// put: the changelog partitions of its tasks, which the new owner must read
// to the end before it runs them, and the output partitions, whose
// read_committed readers see nothing past it, whichever task wrote the
// later records. Kafka aborts the transaction only once the transaction
// timeout has passed and its coordinator's periodic check
// (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default) notices, or when the same transactional ID initializes again:
// a failover took 7–9 s where the session timeout was 3 s.
//
// The new owner of a task therefore ends it: a transaction still open on
// the task's changelog partition belongs to an earlier owner (only a
// task's owner writes its changelog partition), and an owner that is no
// longer a member of the group has lost the task and may not commit.
// Initializing that owner's transactional ID with its current producer ID
// and epoch (KIP-360) aborts the open transaction at once and fences the
// process if it still runs. An owner still in the group handed the task
// over by a cooperative revoke and ends its own transaction; it is left
// alone. Fencing is an optimization: when it fails, the restore waits for
// the broker as before.

// openTxn is a transaction open on a changelog partition, as the
// coordinator describes it.
type openTxn struct {
	txnID   string
	pid     int64
	epoch   int16
	timeout int32 // milliseconds
}

// abandoned returns, of the transactions open on a changelog partition,
// those whose instance of application app is not among members (the
// group's instance IDs) and is not self. A transactional ID outside the
// application's "<app>-<instance>" form is not this application's to end.
func abandoned(app, self string, members []string, open []openTxn) []openTxn {
	var out []openTxn
	for _, o := range open {
		inst, ok := strings.CutPrefix(o.txnID, app+"-")
		if !ok || inst == "" || inst == self || slices.Contains(members, inst) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// fenceAbandoned aborts the transactions that instances no longer in the
// group left open on partition p of changelog. It runs on the task's
// restore goroutine, before the restore; a failure is logged, and the
// restore then waits for the broker to end the transaction.
func (a *App) fenceAbandoned(ctx context.Context, changelog string, p int32) {
	fenced, err := a.fenceAbandonedTxns(ctx, changelog, p)
	for _, f := range fenced {
		a.log.Info("stage: aborted the transaction a departed instance left open on a task's changelog",
			"changelog", changelog, "partition", p, "transactional_id", f.txnID, "producer_id", f.pid, "epoch", f.epoch)
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("stage: could not end a departed instance's open transaction; the restore waits for the broker to time it out",
			"changelog", changelog, "partition", p, "err", err)
	}
}

func (a *App) fenceAbandonedTxns(ctx context.Context, changelog string, p int32) ([]openTxn, error) {
	described, err := a.admin.DescribeProducers(ctx, kadm.TopicsSet{changelog: {p: {}}})
	if err != nil {
		return nil, fmt.Errorf("describe producers of %s[%d]: %w", changelog, p, err)
	}
	var pids []int64
	var perr error
	described.EachPartition(func(d kadm.DescribedProducersPartition) {
		if d.Err != nil {
			perr = fmt.Errorf("describe producers of %s[%d]: %w", d.Topic, d.Partition, d.Err)
		}
		d.ActiveProducers.Each(func(ap kadm.DescribedProducer) {
			if ap.CurrentTxnStartOffset >= 0 {
				pids = append(pids, ap.ProducerID)
			}
		})
	})
	if perr != nil {
		return nil, perr
	}
	if len(pids) == 0 {
		return nil, nil // the usual case: nothing open
	}
	listed, err := a.admin.ListTransactions(ctx, pids, []string{"Ongoing"})
	if err != nil {
		return nil, fmt.Errorf("list transactions of producers %v: %w", pids, err)
	}
	var ids []string
	for _, l := range listed.Sorted() {
		if l.State == "Ongoing" && slices.Contains(pids, l.ProducerID) {
			ids = append(ids, l.TxnID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	txns, err := a.admin.DescribeTransactions(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("describe transactions %v: %w", ids, err)
	}
	var open []openTxn
	for _, d := range txns.Sorted() {
		if d.Err != nil || d.State != "Ongoing" {
			continue
		}
		if _, ok := d.Topics[changelog][p]; !ok {
			continue
		}
		open = append(open, openTxn{txnID: d.TxnID, pid: d.ProducerID, epoch: d.ProducerEpoch, timeout: d.TimeoutMillis})
	}
	if len(open) == 0 {
		return nil, nil
	}
	// Membership is read after the transactions: an instance that
	// restarted and joined since initialized its transactional ID first,
	// which ended its old transaction; one that restarts after this read
	// has the same effect, and the fence then finds the epoch moved on.
	groups, err := a.admin.DescribeGroups(ctx, a.cfg.ApplicationID)
	if err != nil {
		return nil, fmt.Errorf("describe group %q: %w", a.cfg.ApplicationID, err)
	}
	g, ok := groups[a.cfg.ApplicationID]
	if !ok || g.Err != nil {
		return nil, fmt.Errorf("describe group %q: %w", a.cfg.ApplicationID, g.Err)
	}
	var members []string
	for _, m := range g.Members {
		if m.InstanceID != nil {
			members = append(members, *m.InstanceID)
		}
	}
	var fenced []openTxn
	var errs []error
	for _, o := range abandoned(a.cfg.ApplicationID, a.cfg.InstanceID, members, open) {
		if err := a.fence(ctx, o); err != nil {
			errs = append(errs, err)
			continue
		}
		fenced = append(fenced, o)
	}
	return fenced, errors.Join(errs...)
}

// fence initializes o's transactional ID with the producer ID and epoch of
// its open transaction, which makes the coordinator abort it and bump the
// epoch. An answer that the epoch already moved on (the instance restarted,
// or the transaction ended) means there is nothing left to end.
func (a *App) fence(ctx context.Context, o openTxn) error {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(o.txnID)
	req.TransactionTimeoutMillis = o.timeout
	req.ProducerID = o.pid
	req.ProducerEpoch = o.epoch
	resp, err := req.RequestWith(ctx, a.boot)
	if err != nil {
		return fmt.Errorf("fence %s: %w", o.txnID, err)
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil,
		// The abort began; the coordinator answers this until it ends.
		errors.Is(err, kerr.ConcurrentTransactions),
		errors.Is(err, kerr.ProducerFenced),
		errors.Is(err, kerr.InvalidProducerEpoch):
		return nil
	default:
		return fmt.Errorf("fence %s (producer %d epoch %d): %w", o.txnID, o.pid, o.epoch, err)
	}
}

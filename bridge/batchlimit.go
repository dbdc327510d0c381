package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// maxBatch is JetStream's default limit on the messages of one atomic
// batch (server option max_batch_size, jetstream limits). The bridge
// learns the limit of the stream's server (probeLimit) before its first
// batch, and publishes a step that delivers more as consecutive batches.
const maxBatch = 1000

// maxProbedBatch is the largest batch the bridge uses when the server
// allows larger ones: the stage's default step budget (MaxStepRecords), so
// that a default step is one batch there.
const maxProbedBatch = 10_000

// ErrBatchLimit: the stream's server refused atomic batches for their size
// (JetStream error 10199) again after the bridge had learned its limit.
// Retrying would be refused the same way: the step fails instead (a
// *BatchLimitError).
var ErrBatchLimit = errors.New("bridge: stream refuses atomic batches of the size the server says it allows")

// BatchLimitError is the failure ErrBatchLimit names: the stream, the batch
// limit its server reported and the size of the batch it refused.
type BatchLimitError struct {
	Stream string
	Limit  int // the server's limit as the bridge learned it
	Size   int // the messages of the refused batch
	Err    error
}

func (e *BatchLimitError) Error() string {
	return fmt.Sprintf("bridge: stream %q refused an atomic batch of %d messages as too large, after its server reported a limit of %d (max_batch_size): %v", e.Stream, e.Size, e.Limit, e.Err)
}

func (e *BatchLimitError) Unwrap() []error { return []error{ErrBatchLimit, e.Err} }

// probeLimit learns the batch limit of the stream's server, which no API
// reports, from how it answers a message of a batch it does not know: a
// batch sequence above its limit is refused as too large (10199), one at
// or below it as an incomplete batch (10176), and neither is stored (a
// batch starts only at sequence 1). It searches the sequences 2 to
// maxProbedBatch+1 on subject, one request each (about 14).
func (x *atomicBatches) probeLimit(ctx context.Context, subject string) (int, error) {
	p := x.p
	tooLarge := func(seq int) (bool, error) {
		h := nats.Header{}
		h.Set(jetstreamext.BatchIDHeader, newBatchID(p.nc))
		h.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(seq))
		actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		defer cancel()
		resp, err := p.nc.RequestMsgWithContext(actx, &nats.Msg{Subject: subject, Header: h})
		if err != nil {
			return false, err
		}
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			return false, fmt.Errorf("undecodable answer %q: %w", resp.Data, err)
		}
		switch {
		case r.Error != nil && r.Error.ErrorCode == jetstreamext.JSErrCodeBatchPublishExceedsLimit:
			return true, nil
		case r.Error != nil && r.Error.ErrorCode == jetstreamext.JSErrCodeBatchPublishIncomplete:
			return false, nil
		case r.Error != nil:
			return false, r.Error
		}
		return false, fmt.Errorf("unexpected answer %q", resp.Data)
	}
	// The limit is the largest n in [1, maxProbedBatch] with sequence n
	// not too large, or maxProbedBatch; sequence 1 needs no probe.
	lo, hi := 1, maxProbedBatch+1 // lo is allowed; hi is too large or past the cap
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		large, err := tooLarge(mid)
		if err != nil {
			return 0, err
		}
		if large {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, nil
}

// learnLimit sets x.limit, from probeLimit (or the publisher's test
// probe), on subject; a failure is kept in p.failed.
func (x *atomicBatches) learnLimit(ctx context.Context, subject string) {
	p := x.p
	probe := p.probe
	if probe == nil {
		probe = x.probeLimit
	}
	limit, err := probe(ctx, subject)
	if err != nil {
		p.failed = fmt.Errorf("bridge: learn the atomic batch limit of stream %q on %q: %w", p.stream, subject, err)
		return
	}
	x.limit = limit
	if limit < maxBatch {
		p.log.Warn("bridge: the stream's server takes smaller atomic batches than JetStream's default; publishing steps as batches of its limit", "stream", p.stream, "max_batch_size", limit)
	} else {
		p.log.Debug("bridge: learned the atomic batch limit", "stream", p.stream, "limit", limit)
	}
}

// refuse accounts for a batch of n messages the server refused as too
// large (err): its limit was lowered since the bridge learned it. The
// first time, the bridge learns it again before the next batch and the
// step is retried (p.failed); a second refusal at the limit learned since
// is permanent, and the step fails with a *BatchLimitError (p.permanent),
// which stops a bridge instead of retrying a batch the server never takes.
func (x *atomicBatches) refuse(n int, err error) {
	p := x.p
	if x.refused {
		p.permanent = &BatchLimitError{Stream: p.stream, Limit: x.limit, Size: n, Err: err}
		p.failed = p.permanent
		return
	}
	p.log.Warn("bridge: the stream's server refused an atomic batch as too large; learning its limit again", "stream", p.stream, "records", n, "limit", x.limit)
	x.refused, x.limit = true, 0
	p.failed = err
}

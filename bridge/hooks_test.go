package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/stage"
)

// hooked is a publisher as the stage's external sink, observed by a
// test: after, when set, runs once every publish of a step was
// acknowledged, and an error from it fails the step (a crash between
// acknowledgement and commit); peak and peakSubj are the most publishes
// ever in flight, in all and on one subject.
type hooked struct {
	*publisher
	after          func() error
	peak, peakSubj int
	largestStep    int       // most records a step handed the publisher
	begun          time.Time // when the current step began

	mu           sync.Mutex
	firstRecords time.Time // when the first step that handed the publisher records began
}

// started returns when the first step that handed the publisher records
// began, or the zero time until that step reaches its Settle. A batch may
// be stored in the middle of a step (when it fills one), so a reader that
// saw a step's records stored may have to wait for this.
func (h *hooked) started() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.firstRecords
}

func (h *hooked) Begin(ctx context.Context) {
	h.begun = time.Now()
	if _, ok := h.js.(peakJS); !ok && h.js != nil {
		h.js = peakJS{h.js, h}
	}
	h.publisher.Begin(ctx)
}

func (h *hooked) Settle(ctx context.Context) error {
	h.largestStep = max(h.largestStep, len(h.step))
	h.mu.Lock()
	if len(h.step) > 0 && h.firstRecords.IsZero() {
		// Steps without records (the one that builds a restored task's
		// gate, an aborted first poll) are startup, not forwarding.
		h.firstRecords = h.begun
	}
	h.mu.Unlock()
	if err := h.publisher.Settle(ctx); err != nil {
		return err
	}
	if h.after != nil {
		return h.after()
	}
	return nil
}

// peakJS records the publishes in flight as each publish starts.
type peakJS struct {
	jetstream.JetStream
	h *hooked
}

func (j peakJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	p := j.h.publisher
	j.h.peak = max(j.h.peak, len(p.perMsg().pending)+1)
	j.h.peakSubj = max(j.h.peakSubj, p.perMsg().bySubj[m.Subject]+1)
	return j.JetStream.PublishMsgAsync(m, opts...)
}

// newHooked returns a bridge over cfg whose steps the returned hooked
// observes.
func newHooked(t testing.TB, cfg Config) (*Bridge, *hooked) {
	t.Helper()
	h := &hooked{}
	b, err := newBridge(cfg, func(p *publisher) stage.External {
		h.publisher = p
		return h
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

// forwardHooked is Forward with the sink observed by h.
func forwardHooked(b *stage.Builder, t *stage.Topic[[]byte, []byte], s *Sink, h *hooked) *stage.Builder {
	h.publisher = s.p
	return forward(b, t, s.p, h)
}

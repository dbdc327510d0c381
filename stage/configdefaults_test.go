package stage

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// The defaults Config states for its Kafka timeouts are franz-go's.
func TestKgoDefaults(t *testing.T) {
	cl, err := kgo.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		opt  any
		want time.Duration
	}{
		{kgo.SessionTimeout, kgoSessionTimeout},
		{kgo.RebalanceTimeout, kgoRebalanceTimeout},
		{kgo.TransactionTimeout, kgoTransactionTimeout},
	} {
		if got := cl.OptValue(tc.opt); got != tc.want {
			t.Errorf("franz-go's default %T = %v, Config states %v", tc.opt, got, tc.want)
		}
	}
}

// WithDefaults applies every default a Config field states, in one place:
// the runtime reads its settings from the result only.
func TestConfigDefaults(t *testing.T) {
	d := Config{}.WithDefaults()
	for _, tc := range []struct {
		field     string
		got, want any
	}{
		{"RetryBackoff", d.RetryBackoff, time.Second},
		{"MaxPollRecords", d.MaxPollRecords, 500},
		{"CommitInterval", d.CommitInterval, 100 * time.Millisecond},
		{"MaxStepRecords", d.MaxStepRecords, 10_000},
		{"DecodeAhead", d.DecodeAhead, min(1, runtime.GOMAXPROCS(0)-1)},
		{"StateCache", d.StateCache, int64(state.DefaultCacheBytes)},
		{"PollInterval", d.PollInterval, 250 * time.Millisecond},
		{"SessionTimeout", d.SessionTimeout, 45 * time.Second},
		{"RebalanceTimeout", d.RebalanceTimeout, 60 * time.Second},
		{"TransactionTimeout", d.TransactionTimeout, 40 * time.Second},
		{"TruncateInterval", d.TruncateInterval, 10 * time.Minute},
		{"HoldWarningAfter", d.HoldWarningAfter, 30 * time.Second},
		{"Logger", d.Logger, slog.Default()},
		{"Propagator", d.Propagator, propagation.TextMapPropagator(propagation.TraceContext{})},
		{"WallClock set", d.WallClock != nil, true},
	} {
		if tc.got != tc.want {
			t.Errorf("default %s = %v, want %v", tc.field, tc.got, tc.want)
		}
	}

	// Off and clamped values.
	off := Config{DecodeAhead: -1, StateCache: -1, MaxPollRecords: 800, MaxStepRecords: 100}.WithDefaults()
	if off.DecodeAhead != 0 || off.StateCache != 0 || off.MaxStepRecords != 800 {
		t.Errorf("DecodeAhead %d, StateCache %d, MaxStepRecords %d; want 0, 0, 800 (at least MaxPollRecords)", off.DecodeAhead, off.StateCache, off.MaxStepRecords)
	}
	if many := (Config{DecodeAhead: 1 << 20}).WithDefaults(); many.DecodeAhead != max(runtime.GOMAXPROCS(0)-1, 0) {
		t.Errorf("DecodeAhead %d on %d cores; want GOMAXPROCS-1", many.DecodeAhead, runtime.GOMAXPROCS(0))
	}
}

// A Kafka timeout set in ClientOpts is the default of its Config field,
// which overrides it; the runtime then passes one value everywhere (the
// session's options, its heartbeat interval, the step timeout).
func TestTimeoutsFromClientOpts(t *testing.T) {
	opts := []kgo.Opt{kgo.SessionTimeout(9 * time.Second), kgo.RebalanceTimeout(8 * time.Second), kgo.TransactionTimeout(7 * time.Second)}
	d := Config{ClientOpts: opts}.WithDefaults()
	if d.SessionTimeout != 9*time.Second || d.RebalanceTimeout != 8*time.Second || d.TransactionTimeout != 7*time.Second {
		t.Errorf("from ClientOpts: session %v, rebalance %v, transaction %v; want 9s, 8s, 7s", d.SessionTimeout, d.RebalanceTimeout, d.TransactionTimeout)
	}
	d = Config{ClientOpts: opts, SessionTimeout: 3 * time.Second, TransactionTimeout: 2 * time.Second}.WithDefaults()
	if d.SessionTimeout != 3*time.Second || d.RebalanceTimeout != 8*time.Second || d.TransactionTimeout != 2*time.Second {
		t.Errorf("fields over ClientOpts: session %v, rebalance %v, transaction %v; want 3s, 8s, 2s", d.SessionTimeout, d.RebalanceTimeout, d.TransactionTimeout)
	}
	a := &App{cfg: d}
	if got := a.stepTimeout(); got != 4*time.Second {
		t.Errorf("step timeout %v, want twice the transaction timeout, 4s", got)
	}
}

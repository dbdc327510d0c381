package netsoak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic and stream names of the soak's pipeline.
const (
	TopicOrders   = "orders"
	TopicPayments = "payments"
	TopicSettled  = "settled"
	TopicAudited  = "audited"
	Application   = "netsoak"
	StreamName    = "NETSOAK"
	Partitions    = 3
	bridgeGroup   = "netsoak-bridge"
)

// stages builds settle (a per-key count over orders and payments) and
// audit (settle's output re-emitted with the coordinate it came from).
func stages() []*stage.Stage {
	orders := stage.NewTopic(TopicOrders, stage.String(), stage.JSON[Value]())
	payments := stage.NewTopic(TopicPayments, stage.String(), stage.JSON[Value]())
	settled := stage.NewTopic(TopicSettled, stage.String(), stage.JSON[Value]())
	audited := stage.NewTopic(TopicAudited, stage.String(), stage.JSON[Value]())

	count := func(n int64, m stage.Message[string, Value]) (stage.Step[int64], error) {
		n++
		src := coord(m.Topic, m.Partition, m.Offset)
		return stage.Next(n, settled.Send(m.Key, Value{Src: src, G: m.Value.G, Key: m.Key, N: n, From: src})), nil
	}
	b := stage.WithState(stage.Named("settle"), stage.Int64(), 0)
	stage.OnFold(b, orders, count)
	stage.OnFold(b, payments, count)
	settle := b.Into(settled).MustBuild()

	audit := stage.On(stage.Named("audit"), settled, func(m stage.Message[string, Value]) ([]stage.Emission, error) {
		v := m.Value
		v.From = coord(m.Topic, m.Partition, m.Offset)
		return []stage.Emission{audited.Send(m.Key, v)}, nil
	}).Into(audited).MustBuild()
	return []*stage.Stage{settle, audit}
}

// instance is one stage process of the soak: an App that can be stopped,
// wiped and started again on the same links.
type instance struct {
	name     string
	dir      string
	cfg      stage.Config
	evidence *fenceLog

	// armed is the fault to fire on this instance's next write of the
	// request kind it waits for (see requestHook); fire injects it.
	armed atomic.Pointer[arm]
	fire  func(*instance, *arm)

	mu     sync.Mutex
	app    *stage.App
	cancel context.CancelFunc
	done   chan error
}

func newInstance(name, stateRoot string, brokers []string, dial func(context.Context, string, string) (net.Conn, error), o *Options, log *slog.Logger) *instance {
	in := &instance{name: name, dir: filepath.Join(stateRoot, name), evidence: &fenceLog{}}
	in.cfg = stage.Config{
		ApplicationID:      Application,
		InstanceID:         name,
		Brokers:            brokers,
		StateDir:           in.dir,
		SessionTimeout:     o.SessionTimeout,
		TransactionTimeout: o.TransactionTimeout,
		RetryBackoff:       200 * time.Millisecond,
		PollInterval:       100 * time.Millisecond,
		ClientOpts: []kgo.Opt{
			kgo.Dialer(dial),
			kgo.WithHooks(requestHook{in}),
			kgo.RequestTimeoutOverhead(5 * time.Second),
		},
		Logger: slog.New(&evidenceHandler{next: log.With("instance", name).Handler(), log: in.evidence}),
	}
	return in
}

// arm is a fault waiting for a request: a reset right after an EndTxn
// request is written (the commit reaches the broker, its answer is lost),
// or a cut or throttle right after a Produce request (a transaction is
// open and mid-step).
type arm struct {
	kind string
	key  int16
}

// Kafka request keys the faults wait for.
const (
	keyProduce = 0
	keyEndTxn  = 26
)

// requestHook fires an armed fault when its request is written.
type requestHook struct{ in *instance }

func (h requestHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	a := h.in.armed.Load()
	if a == nil || a.key != key || err != nil || !h.in.armed.CompareAndSwap(a, nil) {
		return
	}
	go h.in.fire(h.in, a)
}

func (in *instance) start() error {
	app, err := stage.New(in.cfg, stages()...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	in.mu.Lock()
	in.app, in.cancel, in.done = app, cancel, done
	in.mu.Unlock()
	return nil
}

// stop ends the instance's Run and returns its error (nil on a clean stop).
func (in *instance) stop() error {
	in.mu.Lock()
	cancel, done := in.cancel, in.done
	in.cancel, in.done = nil, nil
	in.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("instance %s: %w", in.name, err)
	}
	return nil
}

// failed reports a Run that ended on its own: the soak treats it as a
// failure of the run, since faults are never a reason to stop.
func (in *instance) failed() error {
	in.mu.Lock()
	done := in.done
	in.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case err := <-done:
		in.mu.Lock()
		in.cancel, in.done = nil, nil
		in.mu.Unlock()
		return fmt.Errorf("instance %s stopped by itself: %v", in.name, err)
	default:
		return nil
	}
}

func (in *instance) ready() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.app != nil && in.app.Ready()
}

func (in *instance) wipe() error { return os.RemoveAll(in.dir) }

// aborts returns the instance's aborted-step count, from its metrics.
func (in *instance) aborts() float64 {
	in.mu.Lock()
	app := in.app
	in.mu.Unlock()
	if app == nil {
		return 0
	}
	return sumMetric(app.Collector(), "parsley_step_aborts_total")
}

func sumMetric(c prometheus.Collector, name string) float64 {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return 0
	}
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// fenceLog counts what an instance logged that shows it was fenced or its
// transaction refused: the errors a zombie meets when its link returns.
type fenceLog struct{ n atomic.Int64 }

var fenceMarkers = []string{
	"INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID",
	"FENCED_INSTANCE_ID", "INVALID_TXN_STATE", "TRANSACTION_ABORTABLE", "INVALID_PRODUCER_ID_MAPPING",
	"CONCURRENT_TRANSACTIONS", "REBALANCE_IN_PROGRESS",
}

type evidenceHandler struct {
	next slog.Handler
	log  *fenceLog
}

func (h *evidenceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *evidenceHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		text := r.Message
		r.Attrs(func(a slog.Attr) bool {
			text += " " + a.Value.String()
			return true
		})
		for _, m := range fenceMarkers {
			if strings.Contains(text, m) {
				h.log.n.Add(1)
				break
			}
		}
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *evidenceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &evidenceHandler{next: h.next.WithAttrs(as), log: h.log}
}

func (h *evidenceHandler) WithGroup(g string) slog.Handler {
	return &evidenceHandler{next: h.next.WithGroup(g), log: h.log}
}

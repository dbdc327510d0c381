// Command parsleypeer is the Parsley side of bench/streamspeer: one stage
// at Parsley's default Config doing the fold the Kafka Streams peer does,
// run as its own process so the driver can read its CPU and RSS from /proc.
//
//	parsleypeer -brokers B -app ID -input T -output T -state-dir D -mode stateful|stateless [-instance ID] [-events]
//
// Stateful folds each payment's amount into its key's total (OnFold) and
// emits the payment with the total; stateless emits it with a fee (On).
// With -cpuprofile it writes a pprof CPU profile, and with -requests a JSON
// count and total round-trip time of the Kafka requests of every client
// the application built, by request name, when it stops on SIGTERM. With
// -timeline it writes a CSV timeline of its requests, fetches, deliveries
// and acknowledgements (timeline.go), and with -debuglog franz-go's debug
// log and the stage's, timestamped.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// payment is the benchmark's record; Total and Fee are what the two folds add.
type payment struct {
	ID      int64  `json:"id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	TS      int64  `json:"ts"`
	Total   *int64 `json:"total,omitempty"`
	Fee     *int64 `json:"fee,omitempty"`
}

type total struct{ Sum int64 }

func main() {
	log.SetFlags(0)
	log.SetPrefix("parsleypeer: ")
	brokers := flag.String("brokers", "", "comma-separated seed brokers")
	app := flag.String("app", "", "application ID (also the consumer group)")
	input := flag.String("input", "", "input topic")
	output := flag.String("output", "", "output topic")
	stateDir := flag.String("state-dir", "", "state directory")
	mode := flag.String("mode", "stateful", "stateful (OnFold) or stateless (On)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	requests := flag.String("requests", "", "write Kafka request counts (JSON) here on exit")
	timelineFile := flag.String("timeline", "", "write a CSV timeline of requests, fetches, deliveries and acknowledgements here")
	debugLog := flag.String("debuglog", "", "write franz-go's and the stage's debug logs here")
	instance := flag.String("instance", "peer-1", "instance ID (Config.InstanceID): one per instance of the application")
	events := flag.Bool("events", false, "print restore and readiness events on standard output")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := runOpts{*brokers, *app, *input, *output, *stateDir, *mode, *cpuprofile, *requests, *timelineFile, *debugLog, *instance, *events}
	if err := run(ctx, o); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// build returns the stage of mode; deliver, if not nil, is called with
// every payment the handler is given.
func build(mode, input, output string, deliver func(topic string, partition int32, offset, id int64)) (*stage.Stage, error) {
	in := stage.NewTopic(input, stage.String(), stage.String())
	out := stage.NewTopic(output, stage.String(), stage.String())
	switch mode {
	case "stateful":
		b := stage.WithState(stage.Named("fold"), stage.JSON[total](), total{})
		stage.OnFold(b, in, func(s total, m stage.Message[string, string]) (stage.Step[total], error) {
			var p payment
			if err := json.Unmarshal([]byte(m.Value), &p); err != nil {
				return stage.Step[total]{}, fmt.Errorf("payment %q: %w", m.Value, err)
			}
			if deliver != nil {
				deliver(m.Topic, m.Partition, m.Offset, p.ID)
			}
			s.Sum += p.Amount
			sum := s.Sum
			p.Total = &sum
			v, err := json.Marshal(p)
			if err != nil {
				return stage.Step[total]{}, err
			}
			return stage.Next(s, out.Send(m.Key, string(v))), nil
		})
		return b.Into(out).Build()
	case "stateless":
		return stage.On(stage.Named("map"), in, func(m stage.Message[string, string]) ([]stage.Emission, error) {
			var p payment
			if err := json.Unmarshal([]byte(m.Value), &p); err != nil {
				return nil, fmt.Errorf("payment %q: %w", m.Value, err)
			}
			if deliver != nil {
				deliver(m.Topic, m.Partition, m.Offset, p.ID)
			}
			fee := p.Amount / 100
			p.Fee = &fee
			v, err := json.Marshal(p)
			if err != nil {
				return nil, err
			}
			return []stage.Emission{out.Send(m.Key, string(v))}, nil
		}).Into(out).Build()
	}
	return nil, fmt.Errorf("mode %q: want stateful or stateless", mode)
}

type runOpts struct {
	brokers, app, input, output, stateDir, mode string
	cpuprofile, requests, timeline, debugLog    string
	instance                                    string
	events                                      bool
}

func run(ctx context.Context, o runOpts) (err error) {
	var (
		tl      *timeline
		deliver func(string, int32, int64, int64)
	)
	rc := newRequestCounter()
	hooks := []kgo.Hook{rc}
	if o.timeline != "" {
		f, err := os.Create(o.timeline)
		if err != nil {
			return err
		}
		defer f.Close()
		tl = newTimeline(f)
		defer func() {
			if cerr := tl.close(); err == nil {
				err = cerr
			}
		}()
		hooks = append(hooks, tl)
		deliver = tl.deliver
	}
	st, err := build(o.mode, o.input, o.output, deliver)
	if err != nil {
		return err
	}
	opts := []kgo.Opt{kgo.WithHooks(hooks...)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.debugLog != "" {
		f, err := os.Create(o.debugLog)
		if err != nil {
			return err
		}
		defer f.Close()
		w := &lockedWriter{w: f}
		stamp := func() string { return time.Now().UTC().Format("15:04:05.000000") }
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(w, kgo.LogLevelDebug, stamp)))
		logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := stage.New(stage.Config{
		ApplicationID: o.app,
		InstanceID:    o.instance,
		Brokers:       strings.Split(o.brokers, ","),
		StateDir:      o.stateDir,
		Logger:        logger,
		ClientOpts:    opts,
	}, st)
	if err != nil {
		return err
	}
	cpuprofile, requests := o.cpuprofile, o.requests
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.events {
		ectx, cancel := context.WithCancel(ctx)
		defer cancel()
		go reportEvents(ectx, a, os.Stdout)
	}
	err = a.Run(ctx)
	if requests != "" {
		if werr := os.WriteFile(requests, rc.json(), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if ctx.Err() != nil {
		return nil // stopped by the driver
	}
	return err
}

// lockedWriter serialises the writes of two loggers to one file.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// requestCounter counts the requests every client writes, and their
// round-trip time, by request key.
type requestCounter struct {
	mu   sync.Mutex
	n    map[int16]int64
	wait map[int16]time.Duration
}

func newRequestCounter() *requestCounter {
	return &requestCounter{n: make(map[int16]int64), wait: make(map[int16]time.Duration)}
}

var _ kgo.HookBrokerE2E = (*requestCounter)(nil)

func (c *requestCounter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	c.mu.Lock()
	c.n[key]++
	c.wait[key] += e.DurationE2E()
	c.mu.Unlock()
}

// RequestStat is one request kind's count and summed round trip.
type RequestStat struct {
	Count   int64   `json:"count"`
	TotalMS float64 `json:"total_ms"`
}

func (c *requestCounter) json() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]RequestStat, len(c.n))
	for k, n := range c.n {
		out[kmsg.NameForKey(k)] = RequestStat{Count: n, TotalMS: float64(c.wait[k]) / float64(time.Millisecond)}
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return b
}

// reportEvents prints the restore and readiness events of a until ctx
// ends, from the task snapshot the App publishes after every step and idle
// poll, looked at every 10 ms.
func reportEvents(ctx context.Context, a *stage.App, w io.Writer) {
	event := func(name string) { fmt.Fprintf(w, "streamspeer-event %s %d\n", name, time.Now().UnixNano()) }
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	restoring, ready := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := false
		for _, ti := range a.Tasks() {
			now = now || ti.Restoring
		}
		switch {
		case now && !restoring:
			event("restore-start")
		case !now && restoring:
			event("restore-end")
		}
		restoring = now
		if !ready && a.Ready() {
			ready = true
			event("ready")
		}
	}
}

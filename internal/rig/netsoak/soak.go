package netsoak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/bridge"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options configure a soak run.
type Options struct {
	Seed      uint64
	Duration  time.Duration // how long the producer writes under faults
	Instances int           // stage instances (default 3)
	Keys      int           // distinct keys (default 40)
	Rate      time.Duration // pause between produced records (default 10ms)
	// SessionTimeout and TransactionTimeout of the stage instances
	// (defaults 6 s and 10 s): the zombie fault outlasts the first, the
	// throttle fault the second.
	SessionTimeout     time.Duration
	TransactionTimeout time.Duration
	Drain              time.Duration // how long to wait for outputs to catch up (default 2 min)
	Out                io.Writer     // progress lines; nil discards
	Log                *slog.Logger  // the components' logs; nil discards
	// Kafka is the cluster to run on, any broker.Launcher (the embedded
	// broker.Cluster, a real testkafka.Cluster); the run creates its
	// topics there and leaves the launcher open. Nil starts the embedded
	// broker for the run and closes it at the end.
	Kafka broker.Launcher
}

func (o *Options) defaults() {
	if o.Instances <= 0 {
		o.Instances = 3
	}
	if o.Keys <= 0 {
		o.Keys = 40
	}
	if o.Rate <= 0 {
		o.Rate = 10 * time.Millisecond
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 6 * time.Second
	}
	if o.TransactionTimeout <= 0 {
		o.TransactionTimeout = 10 * time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Report is the outcome of a run: the oracle's verdict and what the fault
// schedule injected, counted when it happened.
type Report struct {
	Seed    uint64
	Verdict *Verdict
	// Faults counts each fault kind injected; ZombiesFenced counts the
	// zombies whose in-flight transaction was refused once their link
	// came back (an aborted step or a fencing error on that instance).
	Faults        map[string]int
	Zombies       int
	ZombiesFenced int
	Elapsed       time.Duration
}

// FaultKinds are the faults the schedule injects, each at least once per
// run that is long enough (see Run).
var FaultKinds = []string{"latency", "commit-reset", "zombie", "throttle", "restore-drop"}

// Summary is the run's one line.
func (r *Report) Summary() string {
	var fs []string
	for _, k := range FaultKinds {
		fs = append(fs, fmt.Sprintf("%s=%d", k, r.Faults[k]))
	}
	return fmt.Sprintf("netsoak seed=%d elapsed=%s %s faults[%s] zombies=%d fenced=%d",
		r.Seed, r.Elapsed.Round(time.Second), r.Verdict.Summary(), strings.Join(fs, " "), r.Zombies, r.ZombiesFenced)
}

// OK reports a clean run: no violation, every fault kind injected, and
// every zombie fenced.
func (r *Report) OK() bool {
	if !r.Verdict.OK() || r.ZombiesFenced < r.Zombies || r.Zombies == 0 {
		return false
	}
	for _, k := range FaultKinds {
		if r.Faults[k] == 0 {
			return false
		}
	}
	return true
}

// Run runs the pipeline under the seeded fault schedule for o.Duration,
// lets it drain with every link healthy, and judges it.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	start := time.Now()
	rep := &Report{Seed: o.Seed, Faults: make(map[string]int)}
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Out, "%6.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}

	tmp, err := os.MkdirTemp("", "netsoak")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	cluster := o.Kafka
	if cluster == nil {
		c, err := broker.Start(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cluster = c
	}
	if err := cluster.CreateTopics(ctx,
		broker.Topic{Name: TopicOrders, Partitions: Partitions},
		broker.Topic{Name: TopicPayments, Partitions: Partitions},
		broker.Topic{Name: TopicSettled, Partitions: Partitions},
		broker.Topic{Name: TopicAudited, Partitions: Partitions},
		broker.Topic{Name: stage.ChangelogTopic(Application, "settle"), Partitions: Partitions, Configs: map[string]*string{"cleanup.policy": ptr("compact")}},
		broker.Topic{Name: stage.ChangelogTopic(Application, "audit"), Partitions: Partitions, Configs: map[string]*string{"cleanup.policy": ptr("compact")}},
		broker.Topic{Name: stage.ChangelogTopic(bridgeGroup, "bridge"), Partitions: Partitions, Configs: map[string]*string{"cleanup.policy": ptr("compact")}},
	); err != nil {
		return nil, err
	}
	brokers := cluster.Addrs()
	say("kafka: at %s", strings.Join(brokers, ","))

	natsURL, stopNATS, err := startNATS(tmp)
	if err != nil {
		return nil, err
	}
	defer stopNATS()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: []string{"netsoak.>"}, Duplicates: 5 * time.Minute, AllowAtomicPublish: true}); err != nil {
		return nil, fmt.Errorf("netsoak: create stream: %w", err)
	}
	say("nats: embedded at %s", natsURL)

	links := NewLinks(brokers)
	defer links.Close()
	sched := &schedule{o: &o, links: links, rng: rand.New(rand.NewPCG(o.Seed, 0xfa17)), rep: rep, say: say}

	var insts []*instance
	for i := range o.Instances {
		name := "i" + strconv.Itoa(i+1)
		dial, err := links.Add(name)
		if err != nil {
			return nil, err
		}
		in := newInstance(name, tmp, brokers, dial, &o, o.Log)
		in.fire = sched.fire
		if err := in.start(); err != nil {
			return nil, err
		}
		insts = append(insts, in)
	}
	defer func() {
		for _, in := range insts {
			_ = in.stop()
		}
	}()
	sched.insts = insts

	bdial, err := links.Add("bridge")
	if err != nil {
		return nil, err
	}
	subject, err := bridge.Template("netsoak.{partition}")
	if err != nil {
		return nil, err
	}
	br, err := bridge.New(bridge.Config{
		SinkConfig: bridge.SinkConfig{
			Subject: subject, NATSURL: natsURL, Stream: StreamName, RedeliveryHorizon: 3 * time.Minute,
			Logger: o.Log.With("instance", "bridge"),
		},
		Brokers: brokers, ApplicationID: bridgeGroup, InstanceID: "b1", StateDir: tmp + "/bridge",
		Topics: []string{TopicAudited}, PollInterval: 100 * time.Millisecond,
		SessionTimeout: o.SessionTimeout, TransactionTimeout: o.TransactionTimeout,
		ClientOpts: []kgo.Opt{kgo.Dialer(bdial)},
	})
	if err != nil {
		return nil, err
	}
	bctx, stopBridge := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- br.Run(bctx) }()
	defer func() {
		stopBridge()
		if bdone != nil {
			<-bdone
		}
	}()
	bridgeFailed := func() error {
		select {
		case err := <-bdone:
			bdone = nil
			return fmt.Errorf("netsoak: bridge stopped by itself: %v", err)
		default:
			return nil
		}
	}
	sched.extra = bridgeFailed

	prod, err := newProducer(brokers, o.Seed, o.Keys, o.Rate)
	if err != nil {
		return nil, err
	}
	defer prod.close()
	stopProd := make(chan struct{})
	pdone := make(chan error, 1)
	go func() { pdone <- prod.run(ctx, stopProd) }()
	say("producing for %s under faults (seed %d)", o.Duration, o.Seed)

	// The fault phase: faults in a seeded order until the duration ends.
	faultErr := sched.run(ctx, time.Now().Add(o.Duration))
	close(stopProd)
	if err := <-pdone; err != nil {
		return nil, fmt.Errorf("netsoak: producer: %w", err)
	}
	if faultErr != nil {
		return nil, faultErr
	}
	sched.heal()
	truth := prod.Truth()
	say("producer done: %d records; draining with healthy links", len(truth.Inputs))

	// Drain: wait until each hop caught up (or the drain bound passed:
	// then the oracle reports what is missing).
	adminCl, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	defer adminCl.Close()
	admin := kadm.NewClient(adminCl)
	var committed int
	for _, in := range truth.Inputs {
		if in.Committed {
			committed++
		}
	}
	deadline := time.Now().Add(o.Drain)
	var obs *Observed
	for {
		for _, in := range insts {
			if err := in.failed(); err != nil {
				return nil, err
			}
		}
		if err := bridgeFailed(); err != nil {
			return nil, err
		}
		obs, err = observe(ctx, cluster, admin, js)
		if err != nil {
			return nil, err
		}
		if len(obs.Settled) >= committed && len(obs.Audited) >= len(obs.Settled) && len(obs.Stream) >= len(obs.Audited) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	// Give a zombie still rejoining time to show its evidence, then
	// read everything once more after a settle period: a late write of a
	// fenced zombie must not appear.
	time.Sleep(2 * time.Second)
	if obs, err = observe(ctx, cluster, admin, js); err != nil {
		return nil, err
	}
	sched.countFenced()
	rep.Verdict = Judge(truth, obs)
	rep.Elapsed = time.Since(start)
	say("%s", rep.Summary())
	return rep, nil
}

func ptr[T any](v T) *T { return &v }

func startNATS(dir string) (url string, stop func(), err error) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir + "/nats", NoLog: true, NoSigs: true})
	if err != nil {
		return "", nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return "", nil, errors.New("netsoak: embedded nats-server not ready")
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port), s.Shutdown, nil
}

// observe reads both output topics (read_committed, up to their last
// stable offsets) and the whole stream.
func observe(ctx context.Context, cluster broker.Launcher, admin *kadm.Client, js jetstream.JetStream) (*Observed, error) {
	o := &Observed{}
	var err error
	if o.Settled, err = readTopic(ctx, cluster, admin, TopicSettled); err != nil {
		return nil, err
	}
	if o.Audited, err = readTopic(ctx, cluster, admin, TopicAudited); err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, StreamName)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netsoak: stream message %d: %w", seq, err)
		}
		var v Value
		if err := json.Unmarshal(m.Data, &v); err != nil {
			return nil, fmt.Errorf("netsoak: stream message %d: %w", seq, err)
		}
		o.Stream = append(o.Stream, Output{Offset: int64(seq), Src: v.Src, G: v.G, Key: v.Key, N: v.N,
			From: m.Header.Get(bridge.HeaderCoordinate)})
	}
	return o, nil
}

// readTopic reads every committed record of topic, partition by partition
// in offset order, up to the last stable offsets listed when it starts.
// Control records are kept so the read knows it reached the end.
func readTopic(ctx context.Context, cluster broker.Launcher, admin *kadm.Client, topic string) ([]Output, error) {
	ends, err := admin.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	want := make(map[int32]int64)
	offsets := make(map[int32]kgo.Offset)
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			want[lo.Partition] = lo.Offset
			offsets[lo.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	cl, err := cluster.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []Output
	next := make(map[int32]int64)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		done := true
		for p, end := range want {
			if next[p] < end {
				done = false
			}
		}
		if done {
			break
		}
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, fmt.Errorf("netsoak: read %s: %w", topic, err)
		}
		for _, e := range fs.Errors() {
			return nil, fmt.Errorf("netsoak: read %s[%d]: %w", e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() || r.Offset >= want[r.Partition] {
				return
			}
			var v Value
			if err := json.Unmarshal(r.Value, &v); err != nil {
				v.Src = "undecodable: " + err.Error()
			}
			out = append(out, Output{Partition: r.Partition, Offset: r.Offset, Src: v.Src, G: v.G, Key: v.Key, N: v.N, From: v.From})
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

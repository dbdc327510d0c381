// Command streamspeer benchmarks a Parsley stage against Kafka Streams on
// one real Kafka broker (issue #31).
//
//	go run ./bench/streamspeer [-rounds 5] [-records 500000] [-keys 64]
//
// It starts one broker with internal/rig/testkafka, builds the Parsley peer
// (bench/streamspeer/parsleypeer) and the Kafka Streams peer (the Maven
// project in bench/streamspeer/streams), produces the input once (JSON
// payments over -keys keys, -partitions partitions), and alternates rounds
// of Parsley stateful, Streams stateful, Parsley stateless and Streams
// stateless, each with a fresh application ID, group, state directory and
// output topic. A round ends when an external read_committed consumer has
// seen the Nth output. Each round reports throughput (records from the
// first output to the Nth, per second), the ratio to the other system in
// the same round, process CPU per record and max RSS (from /proc), launch
// to first output, and the broker's CPU over the round. Latency rounds then
// run each stateful peer over a fresh input produced at -rate records/s:
// first -warmup records, whose outputs the driver waits to read back so
// that neither peer's start counts, then -latency-records measured ones,
// and report end-to-end latency p50/p99/max of the measured records
// (producer send to read_committed receipt) and the warm-up's worst
// separately. -throughput=false runs the latency rounds only;
// -latency-dump writes every output's send and receipt time as CSV, and
// -timeline the Parsley peer's request and delivery timeline. It needs a
// JDK and Maven, like the real-Kafka test tier.
//
// -large runs the large-state rounds instead (large.go): the stateful fold
// over -large-keys records each of a new key (1,000,000 by default),
// alternating Parsley and Streams rounds, then -restore-rounds rounds that
// fold -restore-keys keys (10,000,000 by default), SIGKILL the peer and
// time its restart twice: on the state directory it left, and on an empty
// one (a full restore from the changelog). -scaleout runs the scale-out
// rounds (scaleout.go): a three-broker cluster, -partitions 12, and 1, 2 and
// 4 instances of each peer (-instances) on the same input.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testkafka"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type options struct {
	rounds, records, keys, partitions int
	throughput                        bool
	rate, latencyRecords, warmup      int
	profileDir, timelineDir           string
	latencyDump, peerB                string
	timeout                           time.Duration

	large                  bool // large.go
	largeKeys, restoreKeys int
	restoreRounds          int
	inPlace                bool
	systems                string
	scaleout               bool // scaleout.go
	instances              string
	partitionsSet          bool // -partitions given: scale-out keeps it
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("streamspeer: ")
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "paired rounds")
	flag.IntVar(&o.records, "records", 500000, "input records per throughput round")
	flag.IntVar(&o.keys, "keys", 64, "distinct keys (accounts)")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of every topic")
	flag.IntVar(&o.rate, "rate", 5000, "input rate of the latency rounds, records/s (0: none)")
	flag.IntVar(&o.latencyRecords, "latency-records", 25000, "measured records per latency round")
	flag.IntVar(&o.warmup, "warmup", 5000, "warm-up records per latency round, produced at -rate and read back before the measured ones")
	flag.StringVar(&o.peerB, "peer-b", "", "a second Parsley peer binary (go build ./bench/streamspeer/parsleypeer of another commit): latency rounds and the large-state fold rounds run it as parsley-b beside the others, an A/B control in the same run")
	flag.BoolVar(&o.throughput, "throughput", true, "run the throughput rounds (false: latency rounds only)")
	flag.StringVar(&o.latencyDump, "latency-dump", "", "write every latency round output (system, round, phase, id, send, receipt, latency) to this CSV file")
	flag.StringVar(&o.timelineDir, "timeline", "", "directory for the Parsley peer's timeline (requests, fetches, deliveries, acknowledgements; CSV) and client debug log per latency round")
	flag.StringVar(&o.profileDir, "profile", "", "directory for the Parsley peer's CPU profiles and request counts")
	flag.DurationVar(&o.timeout, "round-timeout", 5*time.Minute, "give up on a round after this long (the large-state rounds allow ten times as long)")
	flag.BoolVar(&o.large, "large", false, "run the large-state rounds: the fold over -large-keys new keys, then the -restore-keys restore after a kill")
	flag.IntVar(&o.largeKeys, "large-keys", 1000000, "with -large: records of the fold rounds, each of a new key (0: no fold rounds)")
	flag.IntVar(&o.restoreKeys, "restore-keys", 10000000, "with -large: keys of state built, killed and restored in each restore round (0: no restore rounds)")
	flag.IntVar(&o.restoreRounds, "restore-rounds", 1, "with -large: restore rounds (each peer builds, is killed and restarted twice)")
	flag.BoolVar(&o.inPlace, "restart-in-place", true, "with -large: restart each killed peer on its state directory before the restart on an empty one")
	flag.StringVar(&o.systems, "systems", "parsley,streams", "with -large: the peers of the restore rounds, in the order run (parsley, parsley-b with -peer-b, streams)")
	flag.BoolVar(&o.scaleout, "scaleout", false, "run the scale-out rounds on a three-broker cluster: -instances instances of each peer over -partitions (default 12)")
	flag.StringVar(&o.instances, "instances", "1,2,4", "with -scaleout: the instance counts, in the order run")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { o.partitionsSet = o.partitionsSet || f.Name == "partitions" })
	if o.rounds < 1 || o.records < 1 || o.keys < 1 || o.partitions < 1 || o.rate < 0 || o.warmup < 0 || o.latencyRecords < 1 {
		log.Fatal("rounds, records, keys, partitions and latency-records must be positive, rate and warmup not negative")
	}
	if o.large && o.scaleout {
		log.Fatal("-large and -scaleout are separate runs")
	}
	if o.large && (o.largeKeys == 1 || o.largeKeys < 0 || o.restoreKeys < 0 || o.restoreRounds < 0 || (o.restoreKeys > 0 && o.restoreKeys < 2*probes)) {
		log.Fatalf("-large-keys must be 0 (no fold rounds) or at least 2, -restore-keys 0 or at least %d, -restore-rounds not negative", 2*probes)
	}
	for sys := range strings.SplitSeq(o.systems, ",") {
		if sys != "parsley" && sys != "streams" && (sys != "parsley-b" || o.peerB == "") {
			log.Fatalf("-systems %q: %q is not parsley, streams, or parsley-b with -peer-b", o.systems, sys)
		}
	}
	if !o.large && !o.scaleout && !o.throughput && o.rate == 0 {
		log.Fatal("-throughput=false with -rate 0 runs nothing")
	}
	if o.scaleout {
		if _, err := parseInstances(o.instances); err != nil {
			log.Fatal(err)
		}
		if !o.partitionsSet {
			o.partitions = 12
		}
	}
	for flagName, d := range map[string]string{"-profile": o.profileDir, "-timeline": o.timelineDir} {
		if d == "" {
			continue
		}
		// The peers write there; a missing directory would fail the first
		// round after the broker and the input are ready.
		if err := os.MkdirAll(d, 0o755); err != nil {
			log.Fatalf("%s %s: %v", flagName, d, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

type peers struct{ parsley, javaCP, dir string }

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "streamspeer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := buildPeers(ctx, dir)
	if err != nil {
		return err
	}
	cfg, rf := testkafka.Config{Nodes: 1}, 1
	if o.scaleout {
		// Three brokers, each topic on all three and acknowledged by two,
		// as a production cluster runs.
		cfg, rf = testkafka.Config{Nodes: 3, MinInsyncReplicas: 2}, 3
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	c, err := testkafka.Start(sctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	brokers := c.Addrs()
	brokerPIDs, err := childPIDs("kafka.Kafka", cfg.Nodes)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	b := bench{o: o, p: p, cl: cl, adm: adm, brokers: brokers, nodeIDs: c.NodeIDs(), brokerPIDs: brokerPIDs, rf: rf}
	switch {
	case o.large:
		return b.largeRounds(ctx, cl)
	case o.scaleout:
		return b.scaleoutRounds(ctx, cl)
	}
	if o.throughput {
		if err := b.throughputRounds(ctx, cl); err != nil {
			return err
		}
	}
	if o.rate == 0 {
		return nil
	}
	return b.latencyRounds(ctx)
}

// bench is what every round needs: the options, the peers and the
// brokers, and the replication factor of the topics it creates.
type bench struct {
	o          options
	p          peers
	cl         *kgo.Client
	adm        *kadm.Client
	brokers    []string
	nodeIDs    []int32
	brokerPIDs []int
	rf         int
}

// brokerCPU is the CPU time the broker processes have used so far.
func (b bench) brokerCPU() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range b.brokerPIDs {
		d, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

func (b bench) throughputRounds(ctx context.Context, cl *kgo.Client) error {
	o := b.o
	if err := b.createTopic(ctx, "payments", o.partitions, false); err != nil {
		return err
	}
	if err := produce(ctx, cl, "payments", 0, o.records, o.keys, 0); err != nil {
		return err
	}
	fmt.Printf("input: %d payments over %d keys, %d partitions; broker %s (pid %v)\n", o.records, o.keys, o.partitions, strings.Join(b.brokers, ","), b.brokerPIDs)

	type cell struct{ sys, mode string }
	order := []cell{{"parsley", "stateful"}, {"streams", "stateful"}, {"parsley", "stateless"}, {"streams", "stateless"}}
	ratios := map[string][]float64{}
	fmt.Println("round system  mode      rec/s     ratio  cpu/rec  maxRSS   startup  brokerCPU")
	for r := 1; r <= o.rounds; r++ {
		got := map[cell]result{}
		for _, k := range order {
			res, err := b.runRound(ctx, fmt.Sprintf("r%d", r), k.sys, k.mode, "payments", o.records)
			if err != nil {
				return fmt.Errorf("round %d %s %s: %w", r, k.sys, k.mode, err)
			}
			got[k] = res
		}
		for _, k := range order {
			res := got[k]
			other := cell{"streams", k.mode}
			ratio := res.throughput() / got[other].throughput()
			if k.sys == "parsley" {
				ratios[k.mode] = append(ratios[k.mode], ratio)
			}
			fmt.Printf("%5d %-7s %-9s %8.0f %6.2fx %6.1fus %5dMiB %8s %9s\n", r, k.sys, k.mode, res.throughput(), ratio,
				float64(res.cpu.Microseconds())/float64(o.records), res.rss>>20, res.startup.Round(10*time.Millisecond), res.brokerCPU.Round(10*time.Millisecond))
		}
	}
	for _, m := range []string{"stateful", "stateless"} {
		fmt.Printf("median Parsley/Streams throughput, %s: %.2fx over %d rounds %v\n", m, median(ratios[m]), len(ratios[m]), ratios[m])
	}
	return nil
}

func (b bench) latencyRounds(ctx context.Context) (err error) {
	o := b.o
	var dump *latencyCSV
	if o.latencyDump != "" {
		f, err := os.Create(o.latencyDump)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
		if dump, err = newLatencyCSV(f); err != nil {
			return err
		}
		defer func() {
			if ferr := dump.flush(); err == nil {
				err = ferr
			}
		}()
	}
	fmt.Printf("latency at %d rec/s (producer send to read_committed receipt): %d warm-up records read back first, then %d measured per round\n", o.rate, o.warmup, o.latencyRecords)
	fmt.Println("round system    p50      p99      max   warm-up: first output  worst")
	for r := 1; r <= o.rounds; r++ {
		systems := []string{"parsley", "streams"}
		if o.peerB != "" {
			systems = []string{"parsley", "parsley-b", "streams"}
		}
		for _, sys := range systems {
			res, err := b.latencyRound(ctx, r, sys)
			if err != nil {
				return fmt.Errorf("latency round %d %s: %w", r, sys, err)
			}
			lat, warm := latencies(res.measured), latencies(res.warm)
			fmt.Printf("%5d %-7s %6.1fms %7.1fms %7.1fms %19s %7.1fms\n", r, sys, ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100)),
				res.firstWarm.Round(10*time.Millisecond), ms(percentile(warm, 100)))
			if dump != nil {
				if err := dump.write(sys, r, phaseWarmup, res.warm); err != nil {
					return err
				}
				if err := dump.write(sys, r, phaseMeasure, res.measured); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type result struct {
	first, last time.Duration // since launch
	cpu         time.Duration
	rss         int64
	startup     time.Duration
	brokerCPU   time.Duration
	n           int
}

func (r result) throughput() float64 {
	d := r.last - r.first
	if d <= 0 || r.n < 2 {
		return 0
	}
	return float64(r.n-1) / d.Seconds()
}

// peerProc is a running peer: Wait's result arrives on exited, and the
// round's context is cancelled when it does. events holds what it reported
// (events.go).
type peerProc struct {
	cmd     *exec.Cmd
	exited  chan error
	stopped bool
	events  *events
	launch  time.Time
}

// peerSpec is one peer process: sys's peer running mode over input into
// out as application app.
type peerSpec struct {
	app, sys, mode, input, out string
	stateDir                   string // "": the run's directory for app
	instance                   string // Parsley's instance ID; "": peer-1
	timeline                   bool
	tag                        string // names the peer's -profile files beside app and instance
}

// createRoundTopics creates a round's output topic, and for Parsley its
// changelog (Streams creates its own internal topics).
func (b bench) createRoundTopics(ctx context.Context, s peerSpec) error {
	if err := b.createTopic(ctx, s.out, b.o.partitions, false); err != nil {
		return err
	}
	if isParsley(s.sys) {
		return b.createTopic(ctx, stage.ChangelogTopic(s.app, stageName(s.mode)), b.o.partitions, true)
	}
	return nil
}

func isParsley(sys string) bool { return sys == "parsley" || sys == "parsley-b" }

// stageName is the Parsley peer's stage name in mode, which names its
// changelog.
func stageName(mode string) string {
	if mode == "stateful" {
		return "fold"
	}
	return "map"
}

func (b bench) stateDir(s peerSpec) string {
	if s.stateDir != "" {
		return s.stateDir
	}
	return filepath.Join(b.p.dir, s.app)
}

// startPeer creates the round's output (and changelog) topics and starts
// sys's peer on input. cancel is called when the peer exits.
func (b bench) startPeer(ctx context.Context, cancel context.CancelFunc, s peerSpec) (*peerProc, error) {
	if err := b.createRoundTopics(ctx, s); err != nil {
		return nil, err
	}
	return b.launchPeer(cancel, s)
}

// launchPeer starts s's peer process; its topics exist. cancel is called
// when the peer exits.
func (b bench) launchPeer(cancel context.CancelFunc, s peerSpec) (*peerProc, error) {
	o := b.o
	stateDir := b.stateDir(s)
	var cmd *exec.Cmd
	if isParsley(s.sys) {
		args := []string{"-brokers", strings.Join(b.brokers, ","), "-app", s.app, "-input", s.input, "-output", s.out, "-state-dir", stateDir, "-mode", s.mode, "-events"}
		if s.instance != "" {
			args = append(args, "-instance", s.instance)
		}
		if o.profileDir != "" {
			name := s.app
			for _, part := range []string{s.instance, s.tag} {
				if part != "" {
					name += "-" + part
				}
			}
			args = append(args, "-cpuprofile", filepath.Join(o.profileDir, name+".pprof"), "-requests", filepath.Join(o.profileDir, name+".requests.json"))
		}
		if s.timeline && o.timelineDir != "" {
			args = append(args, "-timeline", filepath.Join(o.timelineDir, s.app+".timeline.csv"), "-debuglog", filepath.Join(o.timelineDir, s.app+".debug.log"))
		}
		bin := b.p.parsley
		if s.sys == "parsley-b" {
			bin = o.peerB
		}
		cmd = exec.Command(bin, args...)
	} else {
		cmd = exec.Command("java", "-cp", b.p.javaCP, "parsley.bench.StreamsPeer", strings.Join(b.brokers, ","), s.app, s.input, s.out, stateDir, s.mode, strconv.Itoa(b.rf))
	}
	ev := newEvents(os.Stderr)
	cmd.Stdout, cmd.Stderr = ev, os.Stderr
	pp := &peerProc{cmd: cmd, exited: make(chan error, 1), events: ev, launch: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		pp.exited <- cmd.Wait()
		cancel() // a peer that exits before the round ends fails the round
	}()
	return pp, nil
}

// exitErr returns why the round's context ended: the peer's exit if it
// exited, else ctx's error.
func (pp *peerProc) exitErr(ctx context.Context, got, want int) error {
	select {
	case werr := <-pp.exited:
		pp.stopped = true
		return fmt.Errorf("peer exited after %d of %d outputs: %v", got, want, werr)
	default:
	}
	return fmt.Errorf("%d of %d outputs: %w", got, want, ctx.Err())
}

// stop ends the peer with SIGTERM, or kills it after 30 s.
func (pp *peerProc) stop() {
	if pp.stopped {
		return
	}
	pp.stopped = true
	_ = pp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pp.exited:
	case <-time.After(30 * time.Second):
		_ = pp.cmd.Process.Kill()
		<-pp.exited
	}
}

// kill ends a peer the round gave up on.
func (pp *peerProc) kill() {
	if !pp.stopped {
		pp.stopped = true
		_ = pp.cmd.Process.Kill()
		<-pp.exited
	}
}

// runRound starts one peer on input, and ends once n outputs are seen.
func (b bench) runRound(ctx context.Context, tag, sys, mode, input string, n int) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	app := fmt.Sprintf("sp-%s-%s-%s", tag, sys, mode)
	out := app + "-out"
	res, pp, err := b.foldRound(ctx, cancel, peerSpec{app: app, sys: sys, mode: mode, input: input, out: out}, n)
	if pp != nil {
		pp.stop()
	}
	return res, err
}

// foldRound starts s's peer and waits for n outputs; it returns the peer
// still running, for the caller to stop or kill.
func (b bench) foldRound(ctx context.Context, cancel context.CancelFunc, s peerSpec, n int) (result, *peerProc, error) {
	brokerBefore, err := b.brokerCPU()
	if err != nil {
		return result{}, nil, err
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(s.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return result{}, nil, err
	}
	defer consumer.Close()
	pp, err := b.startPeer(ctx, cancel, s)
	if err != nil {
		return result{}, nil, err
	}
	launch := pp.launch
	var res result
	for res.n < n {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			pp.kill()
			return res, nil, pp.exitErr(ctx, res.n, n)
		}
		now := time.Now()
		fs.EachRecord(func(*kgo.Record) {
			if res.n == 0 {
				res.first = now.Sub(launch)
			}
			res.n++
		})
		res.last = now.Sub(launch)
	}
	res.startup = res.first
	if res.cpu, err = procCPU(pp.cmd.Process.Pid); err != nil {
		pp.kill()
		return res, nil, err
	}
	if res.rss, err = procRSS(pp.cmd.Process.Pid); err != nil {
		pp.kill()
		return res, nil, err
	}
	brokerAfter, err := b.brokerCPU()
	if err != nil {
		pp.kill()
		return res, nil, err
	}
	res.brokerCPU = brokerAfter - brokerBefore
	return res, pp, nil
}

// latencyResult is one latency round: the warm-up's and the measured
// records' samples, and the time from launch to the first warm-up output.
type latencyResult struct {
	warm, measured []sample
	firstWarm      time.Duration
}

// errDuplicateOutput fails a latency round whose output holds an input
// record twice: exactly-once is broken, and the figures mean nothing.
var errDuplicateOutput = errors.New("streamspeer: duplicate output")

// latencyRound starts sys's stateful peer on an empty input, and once its
// group is Stable produces o.warmup records at o.rate; once every one of
// their outputs is read back, so the peer is running, it produces
// o.latencyRecords more at o.rate, the measured ones, and ends when all
// their outputs are read.
func (b bench) latencyRound(ctx context.Context, round int, sys string) (latencyResult, error) {
	o := b.o
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	input := fmt.Sprintf("lat-r%d-%s", round, sys)
	if err := b.createTopic(ctx, input, o.partitions, false); err != nil {
		return latencyResult{}, err
	}
	app := fmt.Sprintf("sp-lat%d-%s-stateful", round, sys)
	out := app + "-out"
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return latencyResult{}, err
	}
	defer cl.Close()
	launch := time.Now()
	pp, err := b.startPeer(ctx, cancel, peerSpec{app: app, sys: sys, mode: "stateful", input: input, out: out, timeline: true})
	if err != nil {
		return latencyResult{}, err
	}
	defer pp.kill()
	warmed := make(chan struct{})
	prodErr := make(chan error, 1)
	go func() {
		// Let the peer join its group first, so the rate is what it sees.
		if err := waitStable(ctx, b.adm, app); err != nil {
			prodErr <- err
			return
		}
		if err := produce(ctx, cl, input, 0, o.warmup, o.keys, o.rate); err != nil {
			prodErr <- err
			return
		}
		select {
		case <-warmed:
		case <-ctx.Done():
			prodErr <- ctx.Err()
			return
		}
		prodErr <- produce(ctx, cl, input, o.warmup, o.latencyRecords, o.keys, o.rate)
	}()
	res := latencyResult{warm: make([]sample, 0, o.warmup), measured: make([]sample, 0, o.latencyRecords)}
	seen := make(map[int64]bool, o.warmup+o.latencyRecords)
	total := o.warmup + o.latencyRecords
	if o.warmup == 0 {
		close(warmed)
	}
	var bad error
	for len(seen) < total && bad == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return res, pp.exitErr(ctx, len(seen), total)
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			var v struct {
				ID int64 `json:"id"`
				TS int64 `json:"ts"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.TS <= 0 {
				bad = errors.Join(bad, fmt.Errorf("output %s[%d]@%d: no id and send time: %q", r.Topic, r.Partition, r.Offset, r.Value))
				return
			}
			if seen[v.ID] {
				bad = errors.Join(bad, fmt.Errorf("%w: input record %d", errDuplicateOutput, v.ID))
				return
			}
			seen[v.ID] = true
			s := sample{id: v.ID, send: time.Unix(0, v.TS), receipt: now}
			if v.ID < int64(o.warmup) {
				if len(res.warm) == 0 {
					res.firstWarm = now.Sub(launch)
				}
				res.warm = append(res.warm, s)
				if len(res.warm) == o.warmup {
					close(warmed)
				}
			} else {
				res.measured = append(res.measured, s)
			}
		})
	}
	if bad != nil {
		return res, bad
	}
	pp.stop()
	if err := <-prodErr; err != nil {
		return res, err
	}
	return res, nil
}

func buildPeers(ctx context.Context, dir string) (peers, error) {
	p := peers{parsley: filepath.Join(dir, "parsleypeer"), dir: dir}
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", p.parsley, "./bench/streamspeer/parsleypeer").CombinedOutput(); err != nil {
		return p, fmt.Errorf("build the Parsley peer (run from the module root): %w\n%s", err, b)
	}
	pom := filepath.Join("bench", "streamspeer", "streams", "pom.xml")
	cpFile := filepath.Join("bench", "streamspeer", "streams", "target", "classpath.txt")
	if b, err := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", pom, "package", "dependency:build-classpath", "-Dmdep.outputFile="+filepath.Join("target", "classpath.txt")).CombinedOutput(); err != nil {
		return p, fmt.Errorf("build the Kafka Streams peer: %w\n%s", err, b)
	}
	cp, err := os.ReadFile(cpFile)
	if err != nil {
		return p, err
	}
	jar, err := filepath.Abs(filepath.Join("bench", "streamspeer", "streams", "target", "streamspeer-0.jar"))
	if err != nil {
		return p, err
	}
	p.javaCP = jar + string(os.PathListSeparator) + strings.TrimSpace(string(cp))
	return p, nil
}

// createTopic creates a topic of b's replication factor and waits until
// the cluster lists it with every partition.
func (b bench) createTopic(ctx context.Context, name string, partitions int, compact bool) error {
	var cfg map[string]*string
	if compact {
		c := "compact"
		cfg = map[string]*string{"cleanup.policy": &c}
	}
	resp, err := b.adm.CreateTopic(ctx, int32(partitions), int16(b.rf), cfg, name)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("create %s: %w", name, resp.Err)
	}
	// A peer that checks its topics at start must find this one, whichever
	// broker it asks: each learns of a new topic on its own.
	for _, id := range b.nodeIDs {
		for !b.brokerLists(ctx, id, name, partitions) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("create %s: broker %d: %w", name, id, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// brokerLists reports whether broker id's metadata has topic with all its
// partitions and their leaders.
func (b bench) brokerLists(ctx context.Context, id int32, topic string, partitions int) bool {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, b.cl.Broker(int(id)))
	if err != nil || len(resp.Topics) != 1 {
		return false
	}
	rt := resp.Topics[0]
	if rt.ErrorCode != 0 || len(rt.Partitions) != partitions {
		return false
	}
	for _, p := range rt.Partitions {
		if p.ErrorCode != 0 || p.Leader < 0 {
			return false
		}
	}
	return true
}

// produce writes n payments with ids from..from+n-1 over keys accounts,
// each stamped with its send time; with rate > 0 it paces them at rate
// records/s.
func produce(ctx context.Context, cl *kgo.Client, topic string, from, n, keys, rate int) error {
	var (
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for j := range n {
		i := from + j
		if rate > 0 {
			if err := wait(ctx, time.Until(start.Add(time.Duration(j)*time.Second/time.Duration(rate)))); err != nil {
				return err
			}
		}
		key := "acct-" + strconv.Itoa(i%keys)
		v := fmt.Sprintf(`{"id":%d,"account":%q,"amount":%d,"ts":%d}`, i, key, 100+i%9900, time.Now().UnixNano())
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)}, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// wait sleeps for d, or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func waitStable(ctx context.Context, adm *kadm.Client, group string) error {
	for {
		gs, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := gs[group]; ok && g.State == "Stable" && len(g.Members) > 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(b)
}

// childPIDs finds this process's n children whose command lines hold
// marker: testkafka starts each broker JVM as a child and does not expose
// its pid.
func childPIDs(marker string, n int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if pp, err := parseStatPPID(st); err != nil || pp != self {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != n {
		return nil, fmt.Errorf("streamspeer: %d child processes running %s, want %d", len(pids), marker, n)
	}
	return pids, nil
}

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
// run each stateful peer over a fresh input produced at -rate records/s and
// report end-to-end latency p50/p99 (producer send to consumer receipt).
// It needs a JDK and Maven, like the real-Kafka test tier.
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
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testkafka"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	rounds, records, keys, partitions int
	rate, latencyRecords              int
	profileDir                        string
	timeout                           time.Duration
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
	flag.IntVar(&o.latencyRecords, "latency-records", 25000, "records per latency round")
	flag.StringVar(&o.profileDir, "profile", "", "directory for the Parsley peer's CPU profiles and request counts")
	flag.DurationVar(&o.timeout, "round-timeout", 5*time.Minute, "give up on a round after this long")
	flag.Parse()
	if o.rounds < 1 || o.records < 1 || o.keys < 1 || o.partitions < 1 || o.rate < 0 {
		log.Fatal("rounds, records, keys and partitions must be positive, rate not negative")
	}
	if o.profileDir != "" {
		// The peers write their profiles there; a missing directory would
		// fail the first round after the broker and the input are ready.
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			log.Fatalf("-profile %s: %v", o.profileDir, err)
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
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	c, err := testkafka.Start(sctx, testkafka.Config{Nodes: 1})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	brokers := c.Addrs()
	brokerPID, err := childPID("kafka.Kafka")
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopic(ctx, adm, "payments", o.partitions, false); err != nil {
		return err
	}
	if err := produce(ctx, cl, "payments", o.records, o.keys, 0); err != nil {
		return err
	}
	fmt.Printf("input: %d payments over %d keys, %d partitions; broker %s (pid %d)\n", o.records, o.keys, o.partitions, strings.Join(brokers, ","), brokerPID)

	type cell struct{ sys, mode string }
	order := []cell{{"parsley", "stateful"}, {"streams", "stateful"}, {"parsley", "stateless"}, {"streams", "stateless"}}
	ratios := map[string][]float64{}
	fmt.Println("round system  mode      rec/s     ratio  cpu/rec  maxRSS   startup  brokerCPU")
	for r := 1; r <= o.rounds; r++ {
		got := map[cell]result{}
		for _, k := range order {
			res, err := runRound(ctx, o, p, adm, brokers, brokerPID, fmt.Sprintf("r%d", r), k.sys, k.mode, "payments", o.records, false)
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
	if o.rate == 0 {
		return nil
	}
	fmt.Printf("latency at %d rec/s, %d records per round (producer send to read_committed receipt):\n", o.rate, o.latencyRecords)
	for r := 1; r <= o.rounds; r++ {
		for _, sys := range []string{"parsley", "streams"} {
			in := fmt.Sprintf("lat-r%d-%s", r, sys)
			if err := createTopic(ctx, adm, in, o.partitions, false); err != nil {
				return err
			}
			res, err := runRound(ctx, o, p, adm, brokers, brokerPID, fmt.Sprintf("lat%d", r), sys, "stateful", in, o.latencyRecords, true)
			if err != nil {
				return fmt.Errorf("latency round %d %s: %w", r, sys, err)
			}
			fmt.Printf("%5d %-7s p50 %6.1fms  p99 %6.1fms\n", r, sys,
				float64(percentile(res.lat, 50).Microseconds())/1000, float64(percentile(res.lat, 99).Microseconds())/1000)
		}
	}
	return nil
}

type result struct {
	first, last time.Duration // since launch
	cpu         time.Duration
	rss         int64
	startup     time.Duration
	brokerCPU   time.Duration
	n           int
	lat         []time.Duration
}

func (r result) throughput() float64 {
	d := r.last - r.first
	if d <= 0 || r.n < 2 {
		return 0
	}
	return float64(r.n-1) / d.Seconds()
}

// runRound starts one peer on input, and ends once n outputs are seen. With
// paced, the peer starts on an empty input that is then produced at o.rate.
func runRound(ctx context.Context, o options, p peers, adm *kadm.Client, brokers []string, brokerPID int, tag, sys, mode, input string, n int, paced bool) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	app := fmt.Sprintf("sp-%s-%s-%s", tag, sys, mode)
	out := app + "-out"
	if err := createTopic(ctx, adm, out, o.partitions, false); err != nil {
		return result{}, err
	}
	stateDir := filepath.Join(p.dir, app)
	var cmd *exec.Cmd
	switch sys {
	case "parsley":
		name := "map"
		if mode == "stateful" {
			name = "fold"
		}
		if err := createTopic(ctx, adm, stage.ChangelogTopic(app, name), o.partitions, true); err != nil {
			return result{}, err
		}
		args := []string{"-brokers", strings.Join(brokers, ","), "-app", app, "-input", input, "-output", out, "-state-dir", stateDir, "-mode", mode}
		if o.profileDir != "" {
			args = append(args, "-cpuprofile", filepath.Join(o.profileDir, app+".pprof"), "-requests", filepath.Join(o.profileDir, app+".requests.json"))
		}
		cmd = exec.Command(p.parsley, args...)
	default:
		cmd = exec.Command("java", "-cp", p.javaCP, "parsley.bench.StreamsPeer", strings.Join(brokers, ","), app, input, out, stateDir, mode)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	brokerBefore, err := procCPU(brokerPID)
	if err != nil {
		return result{}, err
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return result{}, err
	}
	defer consumer.Close()
	launch := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	// A peer that exits before the round ends fails the round.
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		cancel()
	}()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	prodErr := make(chan error, 1)
	if paced {
		go func() {
			// Let the peer join its group first, so the rate is what it sees.
			if err := waitStable(ctx, adm, app); err != nil {
				prodErr <- err
				return
			}
			prodErr <- produce(ctx, consumer, input, n, o.keys, o.rate)
		}()
	}
	var res result
	for res.n < n {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			select {
			case werr := <-exited:
				stopped = true
				return res, fmt.Errorf("peer exited after %d of %d outputs: %v", res.n, n, werr)
			default:
			}
			return res, fmt.Errorf("%d of %d outputs: %w", res.n, n, err)
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			if res.n == 0 {
				res.first = now.Sub(launch)
			}
			res.n++
			if paced {
				var v struct {
					TS int64 `json:"ts"`
				}
				if json.Unmarshal(r.Value, &v) == nil && v.TS > 0 {
					res.lat = append(res.lat, now.Sub(time.Unix(0, v.TS)))
				}
			}
		})
		res.last = now.Sub(launch)
	}
	res.startup = res.first
	if res.cpu, err = procCPU(cmd.Process.Pid); err != nil {
		return res, err
	}
	if res.rss, err = procRSS(cmd.Process.Pid); err != nil {
		return res, err
	}
	brokerAfter, err := procCPU(brokerPID)
	if err != nil {
		return res, err
	}
	res.brokerCPU = brokerAfter - brokerBefore
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	stopped = true
	if paced {
		if err := <-prodErr; err != nil {
			return res, err
		}
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

func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int, compact bool) error {
	var cfg map[string]*string
	if compact {
		c := "compact"
		cfg = map[string]*string{"cleanup.policy": &c}
	}
	resp, err := adm.CreateTopic(ctx, int32(partitions), 1, cfg, name)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("create %s: %w", name, resp.Err)
	}
	// A peer that checks its topics at start must find this one.
	for {
		td, err := adm.ListTopics(ctx, name)
		if err == nil && td.Has(name) && td[name].Err == nil && len(td[name].Partitions) == partitions {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// produce writes n payments over keys accounts; with rate > 0 it paces
// them at rate records/s and stamps each with its send time.
func produce(ctx context.Context, cl *kgo.Client, topic string, n, keys, rate int) error {
	var errs []error
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		key := "acct-" + strconv.Itoa(i%keys)
		v := fmt.Sprintf(`{"id":%d,"account":%q,"amount":%d,"ts":%d}`, i, key, 100+i%9900, time.Now().UnixNano())
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)}, func(_ *kgo.Record, err error) {
			if err != nil && len(errs) < 1 {
				errs = append(errs, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return errors.Join(errs...)
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

// childPID finds this process's child whose command line holds marker:
// testkafka starts the broker JVM as a child and does not expose its pid.
func childPID(marker string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
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
			return pid, nil
		}
	}
	return 0, fmt.Errorf("streamspeer: no child process running %s", marker)
}

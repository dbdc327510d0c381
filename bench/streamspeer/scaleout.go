package main

// The scale-out rounds (-scaleout): one application of 1, 2 and 4
// instances over the same input on a three-broker cluster, for each peer.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// parseInstances parses -instances: positive counts, comma-separated.
func parseInstances(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-instances %q: want positive counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleResult is one scale-out round of one peer: the throughput window
// from the first output to the last, the instances' CPU over that window
// and in all, their summed peak RSS, and the brokers' CPU.
type scaleResult struct {
	result
	windowCPU time.Duration // all instances' CPU from the first output read to the last
	inWindow  int           // outputs read after the first fetch that had any
}

func (b bench) scaleoutRounds(ctx context.Context, cl *kgo.Client) error {
	o := b.o
	counts, err := parseInstances(o.instances)
	if err != nil {
		return err
	}
	const input = "scale-payments"
	if err := b.createTopic(ctx, input, o.partitions, false); err != nil {
		return err
	}
	if err := produce(ctx, cl, input, 0, o.records, o.keys, 0); err != nil {
		return err
	}
	fmt.Printf("scale-out: %d payments over %d keys, %d partitions, replication factor %d (min.insync.replicas 2); brokers %s (pids %v)\n",
		o.records, o.keys, o.partitions, b.rf, strings.Join(b.brokers, ","), b.brokerPIDs)
	fmt.Println("cpu/rec: the instances' CPU from their first output to their last, per record; total: from launch, startup included")
	fmt.Println("round inst system   rec/s     ratio  cpu/rec  total    sumRSS  startup  brokersCPU  load")
	type key struct {
		n   int
		sys string
	}
	cpu := map[key][]float64{}
	ratios := map[int][]float64{}
	for r := 1; r <= o.rounds; r++ {
		for _, n := range counts {
			got := map[string]scaleResult{}
			for _, sys := range []string{"parsley", "streams"} {
				res, err := b.scaleRound(ctx, r, n, sys, input, o.records)
				if err != nil {
					return fmt.Errorf("scale-out round %d, %d instances, %s: %w", r, n, sys, err)
				}
				got[sys] = res
				cpu[key{n, sys}] = append(cpu[key{n, sys}], res.windowPerRecord())
			}
			ratios[n] = append(ratios[n], got["parsley"].throughput()/got["streams"].throughput())
			for _, sys := range []string{"parsley", "streams"} {
				res := got[sys]
				fmt.Printf("%5d %4d %-7s %8.0f %6.2fx %6.1fus %6.1fus %6dMiB %8s %10s %5s\n", r, n, sys, res.throughput(), res.throughput()/got["streams"].throughput(),
					res.windowPerRecord(), float64(res.cpu.Microseconds())/float64(o.records), res.rss>>20,
					res.startup.Round(10*time.Millisecond), res.brokerCPU.Round(10*time.Millisecond), loadAverage())
			}
		}
	}
	for _, n := range counts {
		p, s := cpu[key{n, "parsley"}], cpu[key{n, "streams"}]
		fmt.Printf("%d instances, medians over %d rounds: CPU per record Parsley %.1fus %s, Streams %.1fus %s; throughput Parsley/Streams %.2fx %s\n",
			n, len(p), median(p), fmtRatios(p), median(s), fmtRatios(s), median(ratios[n]), fmtRatios(ratios[n]))
	}
	return nil
}

// windowPerRecord is the CPU per record, in microseconds, of the window
// from the first output to the last.
func (r scaleResult) windowPerRecord() float64 {
	if r.inWindow < 1 {
		return 0
	}
	return float64(r.windowCPU.Microseconds()) / float64(r.inWindow)
}

// scaleRound starts n instances of sys's peer at once, each with its own
// state directory, and ends when all outputs are read.
func (b bench) scaleRound(ctx context.Context, r, n int, sys, input string, records int) (scaleResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	app := fmt.Sprintf("sp-scale%d-%d-%s", r, n, sys)
	base := peerSpec{app: app, sys: sys, mode: "stateful", input: input, out: app + "-out"}
	if err := b.createRoundTopics(ctx, base); err != nil {
		return scaleResult{}, err
	}
	brokerBefore, err := b.brokerCPU()
	if err != nil {
		return scaleResult{}, err
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(base.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return scaleResult{}, err
	}
	defer consumer.Close()
	var pps []*peerProc
	defer func() {
		var wg sync.WaitGroup
		for _, pp := range pps {
			wg.Go(pp.stop)
		}
		wg.Wait()
	}()
	launch := time.Now()
	for i := 1; i <= n; i++ {
		s := base
		s.instance = fmt.Sprintf("peer-%d", i)
		s.stateDir = filepath.Join(b.p.dir, app, s.instance)
		pp, err := b.launchPeer(cancel, s)
		if err != nil {
			return scaleResult{}, err
		}
		pps = append(pps, pp)
	}
	cpuOf := func() (time.Duration, int64, error) {
		var sum time.Duration
		var rss int64
		for _, pp := range pps {
			c, err := procCPU(pp.cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			m, err := procRSS(pp.cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			sum, rss = sum+c, rss+m
		}
		return sum, rss, nil
	}
	var res scaleResult
	var atFirst time.Duration
	inFirst := 0
	for res.n < records {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			for _, pp := range pps {
				select {
				case werr := <-pp.exited:
					pp.stopped = true
					return res, fmt.Errorf("instance exited after %d of %d outputs: %v", res.n, records, werr)
				default:
				}
			}
			return res, fmt.Errorf("%d of %d outputs: %w", res.n, records, ctx.Err())
		}
		now := time.Now()
		first := res.n == 0
		fs.EachRecord(func(*kgo.Record) {
			if res.n == 0 {
				res.first = now.Sub(launch)
			}
			res.n++
		})
		if first && res.n > 0 {
			// The window starts with the first outputs read: the CPU of
			// their records is counted in the total only.
			if atFirst, _, err = cpuOf(); err != nil {
				return res, err
			}
			inFirst = res.n
		}
		res.last = now.Sub(launch)
	}
	res.startup = res.first
	total, rss, err := cpuOf()
	if err != nil {
		return res, err
	}
	res.cpu, res.rss, res.windowCPU, res.inWindow = total, rss, total-atFirst, res.n-inFirst
	brokerAfter, err := b.brokerCPU()
	if err != nil {
		return res, err
	}
	res.brokerCPU = brokerAfter - brokerBefore
	return res, nil
}

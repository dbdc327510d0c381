package main

// The large-state rounds (-large): the fold over a million new keys
// against Kafka Streams' RocksDB store, and the restore of ten million
// keys after a kill.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// probes is how many records each restart of a restore round reads back:
// payments on keys the killed peer had folded, whose totals must add to
// what the restored state held.
const probes = 64

// largeTimeout is how long a large-state round may take: ten million
// records at tens of thousands a second.
func (b bench) largeTimeout() time.Duration { return 10 * b.o.timeout }

func (b bench) largeRounds(ctx context.Context, cl *kgo.Client) error {
	if b.o.largeKeys > 0 {
		if err := b.largeFoldRounds(ctx, cl); err != nil {
			return err
		}
	}
	return b.restoreRounds(ctx, cl)
}

func (b bench) largeFoldRounds(ctx context.Context, cl *kgo.Client) error {
	o := b.o
	const input = "large-payments"
	if err := b.createTopic(ctx, input, o.partitions, false); err != nil {
		return err
	}
	if err := produce(ctx, cl, input, 0, o.largeKeys, o.largeKeys, 0); err != nil {
		return err
	}
	fmt.Printf("large state: %d payments, each of a new key, %d partitions; broker %s (pid %v)\n", o.largeKeys, o.partitions, strings.Join(b.brokers, ","), b.brokerPIDs)
	fmt.Println("round system    rec/s     ratio  cpu/rec  maxRSS   state  startup  brokerCPU  load")
	systems := []string{"parsley", "streams"}
	if o.peerB != "" {
		systems = []string{"parsley", "parsley-b", "streams"}
	}
	var ratios, cpuRatios, rssRatios []float64
	for r := 1; r <= o.rounds; r++ {
		got := map[string]result{}
		disk := map[string]int64{}
		for _, sys := range systems {
			res, size, err := b.largeFoldRound(ctx, r, sys, input, o.largeKeys)
			if err != nil {
				return fmt.Errorf("large round %d %s: %w", r, sys, err)
			}
			got[sys], disk[sys] = res, size
		}
		p, s := got["parsley"], got["streams"]
		ratios = append(ratios, p.throughput()/s.throughput())
		cpuRatios = append(cpuRatios, float64(p.cpu)/float64(s.cpu))
		rssRatios = append(rssRatios, float64(p.rss)/float64(s.rss))
		for _, sys := range systems {
			res := got[sys]
			fmt.Printf("%5d %-9s %8.0f %6.2fx %6.1fus %5dMiB %5dMiB %8s %9s %5s\n", r, sys, res.throughput(), res.throughput()/s.throughput(),
				float64(res.cpu.Microseconds())/float64(o.largeKeys), res.rss>>20, disk[sys]>>20,
				res.startup.Round(10*time.Millisecond), res.brokerCPU.Round(10*time.Millisecond), loadAverage())
		}
	}
	fmt.Printf("median Parsley/Streams over %d rounds: throughput %.2fx %s, CPU per record %.2f %s, max RSS %.2f %s\n", o.rounds,
		median(ratios), fmtRatios(ratios), median(cpuRatios), fmtRatios(cpuRatios), median(rssRatios), fmtRatios(rssRatios))
	return nil
}

func (b bench) restoreRounds(ctx context.Context, cl *kgo.Client) error {
	o := b.o
	if o.restoreKeys == 0 || o.restoreRounds == 0 {
		return nil
	}
	fmt.Printf("restore: %d payments, each of a new key, on an input of each peer's own (the probes below go to it); each peer folds them, is killed (SIGKILL), and restarts twice once its group is empty: on the state directory it left, then on an empty one; a restart ends when %d payments produced after its launch, on folded keys, are read back with the right totals\n", o.restoreKeys, probes)
	systems := strings.Split(o.systems, ",")
	for r := 1; r <= o.restoreRounds; r++ {
		spans := map[string]time.Duration{}
		for _, sys := range systems {
			rinput := fmt.Sprintf("restore-payments-%d-%s", r, sys)
			if err := b.createTopic(ctx, rinput, o.partitions, false); err != nil {
				return err
			}
			if err := produce(ctx, cl, rinput, 0, o.restoreKeys, o.restoreKeys, 0); err != nil {
				return err
			}
			rs, err := b.restoreRound(ctx, cl, r, sys, rinput, o.restoreKeys)
			if err != nil {
				return fmt.Errorf("restore round %d %s: %w", r, sys, err)
			}
			if len(rs) > 0 {
				spans[sys] = rs[len(rs)-1].restore // the full restore
			}
		}
		for _, sys := range systems {
			if sys != "streams" && spans[sys] > 0 && spans["streams"] > 0 {
				fmt.Printf("round %d: full restore (empty directory), %s/streams time %.2f\n", r, sys, float64(spans[sys])/float64(spans["streams"]))
			}
		}
	}
	return nil
}

func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// largeFoldRound runs one peer's fold over input and returns its figures
// and the size of its state directory once stopped.
func (b bench) largeFoldRound(ctx context.Context, r int, sys, input string, n int) (result, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.largeTimeout())
	defer cancel()
	app := fmt.Sprintf("sp-large%d-%s", r, sys)
	s := peerSpec{app: app, sys: sys, mode: "stateful", input: input, out: app + "-out"}
	res, pp, err := b.foldRound(ctx, cancel, s, n)
	if err != nil {
		return res, 0, err
	}
	pp.stop()
	size, err := dirSize(b.stateDir(s))
	return res, size, err
}

// restart is one restart of a restore round, timed from its launch.
type restart struct {
	what     string
	ready    time.Duration // to the peer's ready event (0: none seen)
	restore  time.Duration // the peer's restore events, first start to last end (0: none seen)
	restored int64         // records restored, as the Kafka Streams peer reports them
	probed   time.Duration // to the last probe's output
	cpu      time.Duration // the process's, to the last probe's output
	rss      int64
}

// restoreRound has sys's peer fold n payments of n keys, kills it, and
// restarts it twice, on its state directory and on an empty one.
func (b bench) restoreRound(ctx context.Context, cl *kgo.Client, r int, sys, input string, n int) ([]restart, error) {
	ctx, cancel := context.WithTimeout(ctx, b.largeTimeout())
	defer cancel()
	app := fmt.Sprintf("sp-restore%d-%s", r, sys)
	s := peerSpec{app: app, sys: sys, mode: "stateful", input: input, out: app + "-out"}
	// The peer is killed on purpose: its exit must not end the round.
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	res, pp, err := b.foldRound(bctx, bcancel, s, n)
	if err != nil {
		return nil, err
	}
	size, err := dirSize(b.stateDir(s))
	if err != nil {
		pp.kill()
		return nil, err
	}
	pp.kill()
	logged, err := b.changelogRecords(ctx, s)
	if err != nil {
		return nil, err
	}
	fmt.Printf("round %d %s: folded %d keys at %.0f rec/s, %.1fus CPU/rec, max RSS %dMiB, %dMiB on disk, changelog %d records; killed (load %s)\n",
		r, sys, n, res.throughput(), float64(res.cpu.Microseconds())/float64(n), res.rss>>20, size>>20, logged, loadAverage())
	fmt.Println("      restart    wait-empty  ready    restore  restored  probes    cpu     maxRSS  load")
	var out []restart
	for phase, what := range []string{"in place", "empty dir"} {
		if phase == 0 && !b.o.inPlace {
			continue
		}
		waited := time.Now()
		if err := waitGroupEmpty(ctx, b.adm, app); err != nil {
			return out, fmt.Errorf("%s: wait for the group to empty: %w", what, err)
		}
		wait := time.Since(waited)
		if phase == 1 {
			if err := os.RemoveAll(b.stateDir(s)); err != nil {
				return out, err
			}
		}
		rs, pp, err := b.restart(ctx, cl, s, n, phase)
		rs.what = what
		if err != nil {
			return out, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, rs)
		restored := "-"
		if rs.restored > 0 {
			restored = fmt.Sprint(rs.restored)
		}
		fmt.Printf("      %-10s %9s %8s %8s %9s %8s %7s %6dMiB %5s\n", what, wait.Round(100*time.Millisecond), rs.ready.Round(10*time.Millisecond),
			rs.restore.Round(10*time.Millisecond), restored, rs.probed.Round(10*time.Millisecond), rs.cpu.Round(10*time.Millisecond), rs.rss>>20, loadAverage())
		if phase == 0 {
			pp.kill()
		} else {
			pp.stop()
		}
	}
	return out, nil
}

// restart launches s's peer again and produces the probes of phase: ids
// n+phase*probes.. on keys phase*probes.., each folded once before the
// kill. It ends when every probe's output is read with the right total,
// and returns the peer still running.
func (b bench) restart(ctx context.Context, cl *kgo.Client, s peerSpec, n, phase int) (restart, *peerProc, error) {
	var rs restart
	// Every output from here on is a probe's.
	ends, err := b.adm.ListEndOffsets(ctx, s.out)
	if err != nil {
		return rs, nil, err
	}
	if err := ends.Error(); err != nil {
		return rs, nil, err
	}
	at := map[string]map[int32]kgo.Offset{s.out: {}}
	ends.Each(func(o kadm.ListedOffset) { at[s.out][o.Partition] = kgo.NewOffset().At(o.Offset) })
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumePartitions(at), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return rs, nil, err
	}
	defer consumer.Close()
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	s.tag = fmt.Sprintf("restart%d", phase)
	pp, err := b.launchPeer(pcancel, s)
	if err != nil {
		return rs, nil, err
	}
	from := n + phase*probes
	if err := produce(ctx, cl, s.input, from, probes, n, 0); err != nil {
		pp.kill()
		return rs, nil, err
	}
	seen := map[int64]bool{}
	var bad error
	for len(seen) < probes && bad == nil {
		fs := consumer.PollFetches(pctx)
		if pctx.Err() != nil {
			pp.kill()
			return rs, nil, pp.exitErr(pctx, len(seen), probes)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if err := checkProbe(r.Value, n, from, seen); err != nil {
				bad = errors.Join(bad, fmt.Errorf("%s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err))
			}
		})
	}
	if bad != nil {
		pp.kill()
		return rs, nil, bad
	}
	rs.probed = time.Since(pp.launch)
	if rs.cpu, err = procCPU(pp.cmd.Process.Pid); err == nil {
		rs.rss, err = procRSS(pp.cmd.Process.Pid)
	}
	if err != nil {
		pp.kill()
		return rs, nil, err
	}
	evs, err := pp.events.all()
	if err != nil {
		pp.kill()
		return rs, nil, err
	}
	if ev, ok := pp.events.first("ready"); ok {
		rs.ready = ev.at.Sub(pp.launch)
	}
	if start, end, records, ok := restoreSpan(evs); ok {
		rs.restore, rs.restored = end.Sub(start), records
	}
	return rs, pp, nil
}

// errProbe is an output of a restart that is not a probe's with the total
// the folded state implies.
var errProbe = errors.New("streamspeer: wrong probe output")

// amount is the amount of payment id, as produce writes it.
func amount(id int64) int64 { return 100 + id%9900 }

// checkProbe checks one output of a restart whose probes are ids from..
// from+probes-1, the payment with id i of key i-n folded once before: its
// total must be that payment's amount plus the probe's, and no probe may
// come twice.
func checkProbe(value []byte, n, from int, seen map[int64]bool) error {
	var v struct {
		ID    int64  `json:"id"`
		Total *int64 `json:"total"`
	}
	if err := json.Unmarshal(value, &v); err != nil || v.Total == nil {
		return fmt.Errorf("%w: no id and total: %q", errProbe, value)
	}
	if v.ID < int64(from) || v.ID >= int64(from+probes) {
		return fmt.Errorf("%w: id %d is no probe of this restart (%d..%d): an input folded again", errProbe, v.ID, from, from+probes-1)
	}
	if seen[v.ID] {
		return fmt.Errorf("%w: probe %d twice", errProbe, v.ID)
	}
	seen[v.ID] = true
	key := v.ID % int64(n)
	if want := amount(key) + amount(v.ID); *v.Total != want {
		return fmt.Errorf("%w: probe %d on key %d has total %d, want %d (the restored state lost or doubled the key)", errProbe, v.ID, key, *v.Total, want)
	}
	return nil
}

// changelogRecords is the sum of the end offsets of s's changelog: the
// records a full restore reads, transaction markers included.
func (b bench) changelogRecords(ctx context.Context, s peerSpec) (int64, error) {
	topic := s.app + "-totals-changelog" // Kafka Streams' name for the store's changelog
	if isParsley(s.sys) {
		topic = stage.ChangelogTopic(s.app, stageName(s.mode))
	}
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, fmt.Errorf("changelog %s: %w", topic, err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum, nil
}

// waitGroupEmpty waits until group has no members: a killed member leaves
// once its session times out.
func waitGroupEmpty(ctx context.Context, adm *kadm.Client, group string) error {
	for {
		gs, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := gs[group]; ok && g.Err == nil && (g.State == "Empty" || g.State == "Dead") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) (int64, error) {
	var sum int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file removed while walking
			}
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			sum += info.Size()
		}
		return nil
	})
	return sum, err
}

// loadAverage is the one-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

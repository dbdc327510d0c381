package stage

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/aliascodec"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/oracle"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The failover soak (#15): three stage processes under steady load on the
// embedded broker; one is killed with SIGKILL and restarted at once
// (within the session timeout), or killed for good and restarted only
// after its tasks moved. It measures, per partition, how long output stops
// after a kill, and checks exactly-once and per-key order with the
// verification kit's shared oracle (internal/rig/oracle), judging only the
// output topic against what the producer wrote (judgeFailoverSoak). It runs
// only when PARSLEY_FAILOVER_SOAK names a duration:
//
//	PARSLEY_FAILOVER_SOAK=2m go test ./stage -run TestFailoverSoak -v
//
// PARSLEY_FAILOVER_ALIASING=1 folds with the zero-copy, in-place state
// codec instead of Int64 (#29).
//
// The instances run with one standby per task; PARSLEY_FAILOVER_STANDBYS
// sets another count (0: none). Every task restore is logged with what it
// read, so the figures show what the standbys spared. To give the tasks
// state that costs something to restore, PARSLEY_FAILOVER_PRELOAD=n first
// sends n records with distinct keys to every partition (each a fold key
// in the task's store) and waits for their outputs before the kills.
const (
	envFailoverSoak     = "PARSLEY_FAILOVER_SOAK"
	envFailoverInstance = "PARSLEY_FAILOVER_INSTANCE"
	envFailoverStandbys = "PARSLEY_FAILOVER_STANDBYS"
	envFailoverPreload  = "PARSLEY_FAILOVER_PRELOAD"
	// envFailoverKeyed, when set, makes the producer key every live record
	// with a key whose murmur2 partition is the one it writes to, as a
	// keyed producer would: each task's outputs then stay on its own output
	// partition. By default keys land on any partition, so the tasks share
	// output partitions (a re-keying topology).
	envFailoverKeyed = "PARSLEY_FAILOVER_KEYED"
	// envFailoverClientLog, when set, makes every stage process log its
	// client's group and transaction events to stderr.
	envFailoverClientLog = "PARSLEY_FAILOVER_CLIENT_LOG"
	// envFailoverAliasing, when set, makes the fold's state codec the
	// zero-copy, in-place one (aliascodec, stagetest.AliasingInt64): the
	// same bytes, so the same oracle must hold (#29).
	envFailoverAliasing = "PARSLEY_FAILOVER_ALIASING"
	failoverChildMode   = "failover"
	soakSessionTimeout  = 3 * time.Second
	soakPartitions      = 6
	soakRestoreLog      = "restores.log"
)

// soakStandbys is the soak's standby count: PARSLEY_FAILOVER_STANDBYS, or 1.
func soakStandbys() (int, error) {
	s := os.Getenv(envFailoverStandbys)
	if s == "" {
		return 1, nil
	}
	return strconv.Atoi(s)
}

// failoverChild runs a counting stage whose outputs name the instance and
// the process that produced them, until it is killed or interrupted.
func failoverChild() int {
	id := os.Getenv(envFailoverInstance)
	proc := fmt.Sprintf("%s/%d", id, os.Getpid())
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	send := func(k, v string, n int64) Emission { return out.Send(k, fmt.Sprintf("%s#%d:%s@%s", k, n, v, proc)) }
	var st *Stage
	if os.Getenv(envFailoverAliasing) != "" {
		b := WithState(Named("count"), Codec[aliascodec.Int64](aliascodec.Codec{}), aliascodec.NewInt64(0))
		OnFold(b, in, func(s aliascodec.Int64, m Message[string, string]) (Step[aliascodec.Int64], error) {
			return Next(s, send(m.Key, m.Value, s.Add(1))), nil // updates the loaded bytes in place
		})
		st = b.Into(out).MustBuild()
	} else {
		b := WithState(Named("count"), Int64(), 0)
		OnFold(b, in, func(n int64, m Message[string, string]) (Step[int64], error) {
			n++
			return Next(n, send(m.Key, m.Value, n)), nil
		})
		st = b.Into(out).MustBuild()
	}
	cfg := Config{
		ApplicationID:      "app",
		InstanceID:         id,
		Brokers:            strings.Split(os.Getenv(envBrokers), ","),
		StateDir:           filepath.Join(os.Getenv(envDir), id),
		PollInterval:       20 * time.Millisecond,
		SessionTimeout:     soakSessionTimeout,
		RebalanceTimeout:   3 * time.Second,
		TransactionTimeout: 5 * time.Second,
		RetryBackoff:       50 * time.Millisecond,
		MaxPollRecords:     50,
		Logger:             testLogger(),
	}
	if os.Getenv(envFailoverClientLog) != "" {
		// A timeline of the group protocol: joins, syncs, revokes and
		// transaction ends, stamped with the wall clock and the process.
		cfg.ClientOpts = []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
			return time.Now().Format("15:04:05.000 ") + proc + " "
		}))}
	}
	var err error
	if cfg.Standbys, err = soakStandbys(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	a, err := New(cfg, st)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restores, err := os.OpenFile(filepath.Join(os.Getenv(envDir), soakRestoreLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer restores.Close()
	var mu sync.Mutex
	began := make(map[int32]time.Time)
	a.hooks.restore = func(_ context.Context, _ string, p int32) {
		mu.Lock()
		began[p] = time.Now()
		mu.Unlock()
	}
	a.hooks.restored = func(_ string, p int32, res state.Restored, err error, _ *state.Store) {
		mu.Lock()
		took := time.Since(began[p])
		mu.Unlock()
		if err == nil {
			// One short write per line: appends from the processes do not
			// interleave.
			fmt.Fprintf(restores, "%s %d %d %d %d %d %d\n", proc, time.Now().UnixMilli(), took.Milliseconds(), p, res.From, res.To, res.Records)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// soakRestore is one task restore a soak process logged.
type soakRestore struct {
	process         string
	at              time.Time // when it ended
	took            time.Duration
	partition       int32
	from, to, reads int64
}

func readSoakRestores(t *testing.T, path string) []soakRestore {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []soakRestore
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r soakRestore
		var ms, took int64
		if _, err := fmt.Sscanf(line, "%s %d %d %d %d %d %d", &r.process, &ms, &took, &r.partition, &r.from, &r.to, &r.reads); err != nil {
			t.Fatalf("restore log line %q: %v", line, err)
		}
		r.at, r.took = time.UnixMilli(ms), time.Duration(took)*time.Millisecond
		out = append(out, r)
	}
	return out
}

// arrival is one output as the soak's reader saw it commit.
type arrival struct {
	at        time.Time
	partition int32  // the task's: the input partition of the key
	key, val  string // val: the input value
	n         int    // the count
	process   string // instance/pid
	out       string // where it was read: out/<partition>@<offset>
}

// judgeFailoverSoak judges the soak's outputs against its ground truth,
// want (per key, the input values in the order produced). Exactly once and
// per-key order are the verification kit's shared oracle's: each input is
// a source (key and value), its lane the key, its rank its place among the
// key's inputs. Only the payload is checked here: an output's count must
// be that place plus one, the fold's state after it. It returns one line
// per violation, none for a correct run.
func judgeFailoverSoak(want map[string][]string, arrivals []arrival) []string {
	var vs []string
	source := func(k, v string) string { return k + " " + v }
	truth := make(map[string]bool)
	rank := make(map[string]int64)
	for k, vals := range want {
		for i, v := range vals {
			s := source(k, v)
			if truth[s] {
				vs = append(vs, fmt.Sprintf("key %s: input %q produced twice: the soak's producer is broken", k, v))
			}
			truth[s], rank[s] = true, int64(i)
		}
	}
	ds := make([]oracle.Delivery, len(arrivals))
	for i, a := range arrivals {
		s := source(a.key, a.val)
		r, known := rank[s]
		if !known {
			r = -1
		}
		ds[i] = oracle.Delivery{Source: s, At: a.out, Lane: a.key, Rank: r}
		if known && int64(a.n) != r+1 {
			vs = append(vs, fmt.Sprintf("key %s: output at %s counts #%d for input %d (%q): wrong per-key state", a.key, a.out, a.n, r+1, a.val))
		}
	}
	for _, f := range oracle.ExactlyOnceInOrder(truth, ds) {
		vs = append(vs, f.String())
	}
	return vs
}

func TestFailoverSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(envFailoverSoak))
	if err != nil || d <= 0 {
		t.Skipf("set %s to a duration to run the failover soak", envFailoverSoak)
	}
	standbys, err := soakStandbys()
	if err != nil || standbys < 0 {
		t.Fatalf("%s=%q: want a count", envFailoverStandbys, os.Getenv(envFailoverStandbys))
	}
	preload := 0
	if s := os.Getenv(envFailoverPreload); s != "" {
		if preload, err = strconv.Atoi(s); err != nil || preload < 0 {
			t.Fatalf("%s=%q: want a count", envFailoverPreload, s)
		}
	}
	e := newEnv(t, broker.Topic{Name: "in", Partitions: soakPartitions}, broker.Topic{Name: "out", Partitions: soakPartitions})
	e.changelogs(soakPartitions, counterStage(NewTopic("in", String(), String()), NewTopic("out", String(), String())))
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	procs := make(map[string]*exec.Cmd)
	spawn := func(id string) {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+failoverChildMode, envFailoverInstance+"="+id,
			envBrokers+"="+strings.Join(e.c.Addrs(), ","), envDir+"="+dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
	}
	kill := func(id string) {
		procs[id].Process.Signal(syscall.SIGKILL)
		procs[id].Wait()
		delete(procs, id)
	}
	ids := []string{"i1", "i2", "i3"}
	for _, id := range ids {
		spawn(id)
	}

	// The producer: one record per partition every 20ms; the ground truth.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	want := make(map[string][]string)
	var arrivals []arrival
	var wg sync.WaitGroup
	// The views (#33): a token writer and readers over the stage's
	// changelog, concurrent with the kills (failover_soak_view_test.go).
	stopViews, checkViews := func() {}, func() {}
	if FailoverSoakView != nil {
		stopViews, checkViews = FailoverSoakView(t, SoakView{
			Brokers: e.c.Addrs(), App: "app", Stage: "count", Input: e.topicID("in"), Partitions: soakPartitions,
			NewClient: e.c.NewClient, Key: keyOnPartition, Dir: t.TempDir(),
			Produced: func(recs []*kgo.Record) {
				mu.Lock()
				for _, r := range recs {
					want[string(r.Key)] = append(want[string(r.Key)], string(r.Value))
				}
				mu.Unlock()
			},
		})
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		cl, err := e.c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		// send produces recs and adds them to the ground truth.
		send := func(recs []*kgo.Record) bool {
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Error(err)
				return false
			}
			mu.Lock()
			for _, r := range recs {
				want[string(r.Key)] = append(want[string(r.Key)], string(r.Value))
			}
			mu.Unlock()
			return true
		}
		// The preload: keys k<p>-<i>, each once, in batches.
		for i := 0; i < preload && ctx.Err() == nil; i += 500 {
			var recs []*kgo.Record
			for p := range int32(soakPartitions) {
				for j := i; j < min(i+500, preload); j++ {
					recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Key: fmt.Appendf(nil, "k%d-%d", p, j), Value: []byte("pre")})
				}
			}
			if !send(recs) {
				return
			}
		}
		keys := make([]string, soakPartitions)
		for p := range int32(soakPartitions) {
			keys[p] = fmt.Sprintf("k%d", p)
			if os.Getenv(envFailoverKeyed) != "" {
				keys[p] = keyOnPartition(keys[p], p, soakPartitions)
			}
		}
		for i := 0; ctx.Err() == nil; i++ {
			var recs []*kgo.Record
			for p := range int32(soakPartitions) {
				k, v := keys[p], fmt.Sprintf("v%d", i)
				recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Key: []byte(k), Value: []byte(v)})
			}
			if !send(recs) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	readCtx, stopReading := context.WithCancel(context.Background())
	go func() {
		defer wg.Done()
		cl, err := e.c.NewClient(kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for readCtx.Err() == nil {
			fs := cl.PollFetches(readCtx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				k := string(r.Key)
				rest := strings.TrimPrefix(string(r.Value), k+"#")
				ns, rest, _ := strings.Cut(rest, ":")
				val, inst, _ := strings.Cut(rest, "@")
				n, _ := strconv.Atoi(ns)
				// Key kp came from input partition p: the task's
				// partition (outputs are partitioned by key hash).
				kp := strings.TrimPrefix(k, "k")
				if i := strings.IndexAny(kp, "-."); i >= 0 {
					kp = kp[:i] // k<p>-<i> preloaded, k<p>.<i> keyed
				}
				p, _ := strconv.Atoi(kp)
				mu.Lock()
				arrivals = append(arrivals, arrival{at: now, partition: int32(p), key: k, val: val, n: n, process: inst,
					out: fmt.Sprintf("out/%d@%d", r.Partition, r.Offset)})
				mu.Unlock()
			})
		}
	}()

	// owners returns, per partition, the process of its latest output.
	owners := func() map[int32]string {
		mu.Lock()
		defer mu.Unlock()
		o := make(map[int32]string)
		for _, a := range arrivals {
			o[a.partition] = a.process
		}
		return o
	}
	type killEvent struct {
		at        time.Time
		process   string
		permanent bool
		owned     map[int32]bool
		rejoined  time.Time // permanent: when the instance came back
	}
	var kills []killEvent
	time.Sleep(8 * time.Second) // the group settles
	for preload > 0 {
		mu.Lock()
		n := len(arrivals)
		mu.Unlock()
		if n >= preload*soakPartitions {
			break
		}
		time.Sleep(time.Second)
	}
	deadline := time.Now().Add(d)
	for round := 0; time.Now().Before(deadline); round++ {
		id := ids[round%len(ids)]
		permanent := round%2 == 1
		process := fmt.Sprintf("%s/%d", id, procs[id].Process.Pid)
		owned := make(map[int32]bool)
		for p, o := range owners() {
			if o == process {
				owned[p] = true
			}
		}
		k := killEvent{at: time.Now(), process: process, permanent: permanent, owned: owned}
		t.Logf("%s kill %s (permanent %v, owned %v)", k.at.Format("15:04:05.000"), process, permanent, slices.Sorted(maps.Keys(owned)))
		kill(id)
		kills = append(kills, k)
		if permanent {
			time.Sleep(soakSessionTimeout + 5*time.Second) // its tasks move
		}
		spawn(id)
		if permanent {
			kills[len(kills)-1].rejoined = time.Now()
		}
		t.Logf("%s spawn %s", time.Now().Format("15:04:05.000"), id)
		time.Sleep(8 * time.Second)
	}
	cancel() // stop producing
	stopViews()
	time.Sleep(5 * time.Second)
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range procs {
			if !yield(id) {
				return
			}
		}
	}) {
		procs[id].Process.Signal(os.Interrupt)
		procs[id].Wait()
	}
	stopReading()
	wg.Wait()
	checkViews()

	// The judge: each input exactly once, in the order produced, counted.
	mu.Lock()
	defer mu.Unlock()
	inputs := 0
	for _, vs := range want {
		inputs += len(vs)
	}
	violations := judgeFailoverSoak(want, arrivals)
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("judge: %d outputs against %d inputs of %d keys, %d violations", len(arrivals), inputs, len(want), len(violations))

	// longestStall returns the longest gap in as (sorted by arrival) over
	// [from, from+8s), up to the window's end: a partition with no output
	// in it stalled all of it (every window ends before the producer
	// stops), and when the gap began.
	longestStall := func(as []arrival, from time.Time) (longest time.Duration, began time.Time) {
		i, _ := slices.BinarySearchFunc(as, from, func(x arrival, y time.Time) int { return x.at.Compare(y) })
		prev, end := from, from.Add(8*time.Second)
		began = from
		for ; i < len(as) && as[i].at.Before(end); i++ {
			if gap := as[i].at.Sub(prev); gap > longest {
				longest, began = gap, prev
			}
			prev = as[i].at
		}
		if gap := end.Sub(prev); gap > longest {
			longest, began = gap, prev
		}
		return longest, began
	}
	// The figures: after each kill, per partition the killed process
	// owned, how long until another process's output arrived (the killed
	// one's last commits may still arrive after the kill); per partition
	// it did not own, the longest gap between outputs in the 8s after the
	// kill; after an instance killed for good comes back, per partition
	// that does not move to it, the longest gap in the 8s after.
	var restartResume, permanentResume, stayStall, rejoinStall []time.Duration
	byPartition := make(map[int32][]arrival)
	for _, a := range arrivals {
		byPartition[a.partition] = append(byPartition[a.partition], a)
	}
	for _, k := range kills {
		for p, as := range byPartition {
			i, _ := slices.BinarySearchFunc(as, k.at, func(x arrival, y time.Time) int { return x.at.Compare(y) })
			if k.owned[p] {
				for ; i < len(as) && as[i].process == k.process; i++ {
				}
				if i < len(as) {
					t.Logf("kill %s at %s: moved partition %d resumes after %v on %s", k.process, k.at.Format("15:04:05.000"), p, as[i].at.Sub(k.at).Round(time.Millisecond), as[i].process)
					if k.permanent {
						permanentResume = append(permanentResume, as[i].at.Sub(k.at))
					} else {
						restartResume = append(restartResume, as[i].at.Sub(k.at))
					}
				}
				continue
			}
			longest, from := longestStall(as, k.at)
			t.Logf("kill %s at %s: partition %d stayed, longest stall %v from %s", k.process, k.at.Format("15:04:05.000"), p, longest.Round(time.Millisecond), from.Format("15:04:05.000"))
			stayStall = append(stayStall, longest)
		}
		if k.rejoined.IsZero() {
			continue
		}
		// The departed instance comes back and takes its share again: the
		// partitions that do not move to it should not notice.
		inst, _, _ := strings.Cut(k.process, "/")
		for p, as := range byPartition {
			if slices.ContainsFunc(as, func(a arrival) bool {
				return !a.at.Before(k.rejoined) && a.at.Before(k.rejoined.Add(8*time.Second)) && strings.HasPrefix(a.process, inst+"/")
			}) {
				continue // moved to it
			}
			longest, from := longestStall(as, k.rejoined)
			t.Logf("%s rejoined at %s: partition %d stayed, longest stall %v from %s", inst, k.rejoined.Format("15:04:05.000"), p, longest.Round(time.Millisecond), from.Format("15:04:05.000"))
			rejoinStall = append(rejoinStall, longest)
		}
	}
	pct := quantile[time.Duration]
	// What the restores of the moved tasks read after a permanent kill,
	// against what a full restore would have read then: the changelog's
	// committed data records below where the restore ended.
	changelog := ChangelogTopic("app", "count")
	records := make(map[int32][]int64)
	for p := range int32(soakPartitions) {
		records[p] = e.changelogDataOffsets(changelog, p)
	}
	var tailReads, fullReads []int
	var restoreTook []time.Duration
	for _, r := range readSoakRestores(t, filepath.Join(dir, soakRestoreLog)) {
		for _, k := range kills {
			if k.permanent && k.owned[r.partition] && r.process != k.process && !r.at.Before(k.at) && r.at.Before(k.at.Add(soakSessionTimeout+5*time.Second)) {
				n, _ := slices.BinarySearch(records[r.partition], r.to)
				t.Logf("kill of %s at %s: partition %d restored by %s from %d to %d, %d records read (full: %d), took %v",
					k.process, k.at.Format("15:04:05.000"), r.partition, r.process, r.from, r.to, r.reads, n, r.took)
				tailReads = append(tailReads, int(r.reads))
				fullReads = append(fullReads, n)
				restoreTook = append(restoreTook, r.took)
			}
		}
	}
	t.Logf("%d kills over %v with %d standbys, %d preloaded keys per partition, aliasing state codec %v; %d outputs", len(kills), d, standbys, preload, os.Getenv(envFailoverAliasing) != "", len(arrivals))
	for _, f := range []struct {
		what string
		ds   []time.Duration
	}{
		{"restart within the session timeout: output resumes after", restartResume},
		{"killed for good: moved partitions resume after", permanentResume},
		{"partitions that did not move: longest stall", stayStall},
		{"departed instance rejoins: partitions that do not move to it, longest stall", rejoinStall},
	} {
		t.Logf("%s p50 %v p99 %v (n=%d)", f.what, pct(f.ds, 0.5).Round(time.Millisecond), pct(f.ds, 0.99).Round(time.Millisecond), len(f.ds))
	}
	t.Logf("killed for good: the moved tasks' restores read p50 %d p99 %d changelog records, taking p50 %v p99 %v; a full restore then: p50 %d p99 %d records (n=%d)",
		quantile(tailReads, 0.5), quantile(tailReads, 0.99), quantile(restoreTook, 0.5), quantile(restoreTook, 0.99),
		quantile(fullReads, 0.5), quantile(fullReads, 0.99), len(tailReads))
}

// quantile returns the q-quantile of xs (nearest rank), the zero value of
// an empty slice.
func quantile[T cmp.Ordered](xs []T, q float64) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	s := slices.Sorted(slices.Values(xs))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// keyOnPartition returns base, or base with a suffix, whose murmur2
// partition among n (what the stage's sends use) is p.
func keyOnPartition(base string, p int32, n int) string {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("out")
	for i := 0; ; i++ {
		k := base
		if i > 0 {
			k = fmt.Sprintf("%s.%d", base, i)
		}
		if int32(tp.Partition(&kgo.Record{Key: []byte(k)}, n)) == p {
			return k
		}
	}
}

package bridge

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The crash test re-executes the test binary as the bridge process.
const (
	// ackedPause is how long the child stays between a step's
	// acknowledgements and its Kafka commit: ample time for the parent to
	// read "acked" and kill it there.
	ackedPause = 25 * time.Millisecond
	// childPoll and childStep size the child's steps: polls of childPoll
	// records, steps of up to childStep, so that a busy step spans polls.
	childPoll, childStep = 5, 20

	envChild   = "PARSLEY_BRIDGE_CRASH_CHILD"
	envBrokers = "PARSLEY_BRIDGE_CRASH_BROKERS"
	envNATS    = "PARSLEY_BRIDGE_CRASH_NATS"
	envDir     = "PARSLEY_BRIDGE_CRASH_DIR"
	envFast    = "PARSLEY_BRIDGE_CRASH_FAST" // set: publish in FastBatch mode
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

// crashChild runs a bridge with small steps until it is killed or
// interrupted. After every acknowledged step, before the Kafka commit, it
// prints "acked N" (the step's records) and pauses, so that the parent can
// kill it inside that window. It prints "dup N" whenever JetStream reports more duplicates,
// and "pub N" after every step: the publishes acknowledged so far.
func crashChild() int {
	subj, _ := Template("kafka.{topic}.{partition}")
	cfg := Config{
		SinkConfig: SinkConfig{
			Subject: subj, NATSURL: os.Getenv(envNATS), NATSOptions: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
			Stream: testStream, MaxInFlight: 4, AckTimeout: 2 * time.Second, ConnectBackoff: 50 * time.Millisecond,
			Logger: testLogger(),
		},
		Brokers: strings.Split(os.Getenv(envBrokers), ","), ApplicationID: "grp", InstanceID: "crashy",
		StateDir: os.Getenv(envDir), Topics: []string{"events"},
		RetryBackoff: 50 * time.Millisecond, MaxPollRecords: childPoll, MaxStepRecords: childStep, PollInterval: 50 * time.Millisecond,
		SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second, TransactionTimeout: 5 * time.Second,
	}
	if os.Getenv(envFast) != "" {
		cfg.Publish = FastBatch
	}
	h := &hooked{}
	b, err := newBridge(cfg, func(p *publisher) stage.External {
		h.publisher = p
		return h
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var dups float64
	h.after = func() error {
		if d := testutil.ToFloat64(b.pub.m.duplicates); d > dups {
			dups = d
			fmt.Printf("dup %d\n", int(d))
		}
		fmt.Printf("pub %d\n", int(testutil.ToFloat64(b.pub.m.published)))
		fmt.Printf("acked %d\n", len(h.step))
		time.Sleep(ackedPause)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := b.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestCrashWithSIGKILL runs the bridge as a separate OS process and kills
// it with SIGKILL while it forwards, several times, each time inside a
// step spanning several polls (after its publishes were acknowledged,
// before its Kafka commit), then lets a last incarnation finish. The
// stream holds every record exactly once, in offset order per partition,
// and some incarnation had to republish a step whose acknowledgements came
// before the kill.
func TestCrashWithSIGKILL(t *testing.T) {
	crashWithSIGKILL(t, false)
}

// TestCrashWithSIGKILLFastBatch is TestCrashWithSIGKILL in FastBatch
// mode.
func TestCrashWithSIGKILLFastBatch(t *testing.T) {
	crashWithSIGKILL(t, true)
}

func crashWithSIGKILL(t *testing.T, fast bool) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	e := newEnv(t, 2, "events")
	childEnv := []string{envChild + "=1"}
	if fast {
		e.allowFastBatch()
		childEnv = append(childEnv, envFast+"=1")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var dups, published atomic.Int64 // published: acknowledged publishes, summed over incarnations
	acked := make(chan int, 1)       // a child is between acknowledgements and commit of a step of this many records
	spawn := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(append(os.Environ(), childEnv...), envBrokers+"="+strings.Join(e.kafka.Addrs(), ","), envNATS+"="+e.natsURL(), envDir+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(out)
			var pub int64 // this incarnation's
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "pub "); ok {
					if v, err := strconv.ParseInt(n, 10, 64); err == nil {
						published.Add(v - pub)
						pub = v
					}
				}
				if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					if v, err := strconv.Atoi(n); err == nil {
						select {
						case acked <- v:
						default:
						}
					}
				}
				if n, ok := strings.CutPrefix(sc.Text(), "dup "); ok {
					if v, err := strconv.Atoi(n); err == nil && v > 0 {
						dups.Add(1)
					}
				}
			}
		}()
		return cmd
	}
	var want []string
	const rounds, batch = 4, 120
	for round := range rounds {
		before := len(e.streamMsgs(testStream))
		cmd := spawn()
		want = append(want, produceN(e, "events", 2, round*batch, batch)...)
		waitFor(t, 30*time.Second, "the child to forward", func() bool { return len(e.streamMsgs(testStream)) >= before+15 })
		// Kill inside the window of the next acknowledged step that
		// spans polls: its redo must find its messages stored and add
		// none.
		select {
		case <-acked: // stale: an earlier step's window
		default:
		}
		step := 0
		for deadline := time.After(30 * time.Second); step <= childPoll; {
			select {
			case step = <-acked:
			case <-deadline:
				t.Fatalf("round %d: the child acknowledged no step of more than one poll (%d records) in 30 s", round, childPoll)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		t.Logf("round %d: killed in a step of %d records (polls of %d), with %d of %d records in the stream", round, step, childPoll, len(e.streamMsgs(testStream)), len(want))
	}
	cmd := spawn()
	waitFor(t, 60*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	time.Sleep(300 * time.Millisecond) // a late duplicate would land now
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exited with %v after an interrupt", err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	if fast {
		// The stream absorbs duplicates in a fast batch without saying so
		// unless it found the whole batch stored: count acknowledgements.
		if n := published.Load(); n <= int64(len(want)) {
			t.Fatalf("%d publishes acknowledged for %d records: no incarnation republished an acknowledged step; the kills missed the ack-to-commit window", n, len(want))
		}
		t.Logf("publishes acknowledged: %d for %d records", published.Load(), len(want))
	} else if dups.Load() == 0 {
		t.Fatal("no incarnation republished an acknowledged step; the kills missed the ack-to-commit window")
	}
	t.Logf("reports of absorbed duplicates: %d", dups.Load())
}

package stage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// The crash test re-executes the test binary as the stage process. These
// variables tell the child what to run.
const (
	envChild   = "PARSLEY_STAGE_CRASH_CHILD"
	envBrokers = "PARSLEY_STAGE_CRASH_BROKERS"
	envDir     = "PARSLEY_STAGE_CRASH_DIR"
	// envPolls names a file holding the polls of the step in progress (0
	// between steps), so the test knows what its kill interrupted.
	envPolls = "PARSLEY_STAGE_CRASH_POLLS"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "":
	case failoverChildMode:
		os.Exit(failoverChild()) // failover_soak_test.go
	default:
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

// crashChild runs the counter stage until it is killed (or interrupted),
// with small steps and a pause before each End so a kill lands inside a
// transaction.
func crashChild() int {
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	cfg := Config{
		ApplicationID:      "app",
		InstanceID:         "crashy",
		Brokers:            strings.Split(os.Getenv(envBrokers), ","),
		StateDir:           os.Getenv(envDir),
		PollInterval:       50 * time.Millisecond,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   3 * time.Second,
		TransactionTimeout: 5 * time.Second,
		RetryBackoff:       50 * time.Millisecond,
		MaxPollRecords:     5,
		MaxStepRecords:     20, // a step spans up to four polls
		Logger:             testLogger(),
	}
	a, err := New(cfg, counterStage(in, out))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	a.hooks.beforeEnd = func(int64) bool {
		time.Sleep(3 * time.Millisecond)
		return false
	}
	if path := os.Getenv(envPolls); path != "" {
		a.hooks.filled = func(polls, _ int) { os.WriteFile(path, []byte(strconv.Itoa(polls)), 0o644) }
		a.hooks.afterCommit = func() { os.WriteFile(path, []byte("0"), 0o644) }
		a.hooks.afterAbort = a.hooks.afterCommit
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestCrashWithSIGKILL runs the stage as a separate OS process, kills it
// with SIGKILL while it is processing, and restarts it — once with its
// SQLite files deleted — several times. The read_committed outputs have no
// duplicate and no gap, and the fold state is a pure fold over the inputs.
// Steps span several polls (MaxStepRecords 4 polls' worth), and at least
// one kill must land inside a transaction whose step took more than one.
func TestCrashWithSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	e.changelogs(2, counterStage(in, out))
	dir := t.TempDir()
	pollsFile := filepath.Join(t.TempDir(), "polls")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spawn := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=1", envBrokers+"="+strings.Join(e.c.Addrs(), ","), envDir+"="+dir, envPolls+"="+pollsFile)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	want := make(map[string][]string)
	produced, midTxn, midMulti := 0, 0, 0
	const rounds, batch = 4, 150
	for round := range rounds {
		if round == 2 {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
		before := len(e.readCommitted("out", produced, 500*time.Millisecond))
		cmd := spawn()
		merge(want, e.inputs("in", batch, 6, 2, produced))
		produced += batch
		// Kill once the child is visibly past where it started, while the
		// rest of the batch is still being processed.
		e.readCommitted("out", before+10, 30*time.Second)
		// Aim the kill at an open transaction: on a real broker a
		// transaction is open for a small part of each step (the commit
		// round trips dominate), so a kill at a random moment rarely lands
		// inside one.
		awaitOngoing(e, "app-crashy", 5*time.Second)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		state := "?"
		if d, err := e.c.Admin().DescribeTransactions(context.Background(), "app-crashy"); err == nil {
			if tx, ok := d["app-crashy"]; ok {
				state = tx.State
			}
		}
		polls := 0
		if b, err := os.ReadFile(pollsFile); err == nil {
			polls, _ = strconv.Atoi(string(b))
		}
		if state == "Ongoing" {
			midTxn++
			if polls > 1 {
				midMulti++
			}
		}
		t.Logf("round %d: killed with %d of %d outputs committed; transaction %s in a step of %d polls", round, len(e.readCommitted("out", produced, 300*time.Millisecond)), produced, state, polls)
	}
	if midTxn == 0 {
		t.Fatal("no kill landed inside a transaction; the test proved nothing about crashes mid-step")
	}
	if midMulti == 0 {
		t.Fatal("no kill landed inside a step of several polls; the test proved nothing about a step spanning a commit interval")
	}
	cmd := spawn()
	outs := e.readExactly("out", produced, 60*time.Second)
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exited with %v after an interrupt", err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, dir), want)
}

// awaitOngoing polls the state of transaction txnID until it is Ongoing or
// timeout passes; the caller checks the state again after acting on it.
func awaitOngoing(e *env, txnID string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		d, err := e.c.Admin().DescribeTransactions(context.Background(), txnID)
		if err == nil && d[txnID].State == "Ongoing" {
			return
		}
	}
}

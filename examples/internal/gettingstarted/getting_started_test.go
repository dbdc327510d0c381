//go:build unix

package gettingstarted

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestGettingStartedRunsTwice assembles the program of "A first stage" in a
// temporary module (assemble) and runs it twice in a row with the page's `go run .`, stopping it as the
// page says (Ctrl-C: an interrupt to its process group). Both runs must
// print the five settlements and exit 0. The second run finds the first
// run's state directory and a new embedded cluster: it must wipe the stale
// stores with a WARN, not stop with "changelog ends before the store's
// checkpoint".
//
// It compiles a module (sharing the build cache), so -short skips it.
func TestGettingStartedRunsTwice(t *testing.T) {
	skipOnRealKafka(t)
	if testing.Short() {
		t.Skip("builds and runs the getting-started program; skipped with -short")
	}
	dir, _ := assemble(t)
	want := settled(1)
	for run := 1; run <= 2; run++ {
		got, stderr := runUntil(t, dir, len(want))
		if !slices.Equal(got, want) {
			t.Fatalf("run %d printed %q, want %q\nstderr:\n%s", run, got, want, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "state", "instance-1")); err != nil {
			t.Fatalf("run %d: no state directory: %v", run, err)
		}
		if run == 2 && !strings.Contains(stderr, "task store wiped") {
			t.Fatalf("run 2 on a new cluster did not report wiping the stale stores:\n%s", stderr)
		}
		if strings.Contains(stderr, "held back") {
			t.Fatalf("run %d: a single instance logged partitions held back:\n%s", run, stderr)
		}
	}
}

// TestGettingStartedOnKafka follows "On a real cluster" on the real-Kafka
// tier's broker (PARSLEY_TEST_BROKERS), where another program made orders
// first, with 2 partitions: the changelog gets the sources' 2; a second
// run prints the first run's settlements and its own; after orders is
// made anew with 3 partitions the start fails naming both counts, and the
// page's commands (delete the changelog, the group and state/) fix it.
func TestGettingStartedOnKafka(t *testing.T) {
	if !broker.Real() {
		t.Skip("needs the real-Kafka tier: set " + broker.EnvBrokers + " (docs/testing.md)")
	}
	c := broker.New(t, broker.Topics(broker.Topic{Name: "orders", Partitions: 2}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, _ := assemble(t)
	args := []string{"--brokers", strings.Join(c.Addrs(), ",")}
	const changelog = "settle-app-settle-changelog"
	partitions := func(topic string) int {
		t.Helper()
		td, err := c.Admin().ListTopics(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return len(td[topic].Partitions)
	}

	for run := 1; run <= 2; run++ {
		want := settled(run) // each run settles its five; the printer reads from the start
		got, stderr := runUntil(t, dir, len(want), args...)
		if !slices.Equal(got, want) {
			t.Fatalf("run %d printed %q, want %q\nstderr:\n%s", run, got, want, stderr)
		}
		for _, bad := range []string{"held back", "task store wiped"} {
			if strings.Contains(stderr, bad) {
				t.Fatalf("run %d logged %q:\n%s", run, bad, stderr)
			}
		}
		if n := partitions(changelog); n != 2 {
			t.Fatalf("run %d: changelog has %d partitions, want the sources' 2", run, n)
		}
	}

	// orders made anew with 3 partitions: the old changelog stops the start.
	if err := c.DeleteTopics(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopics(ctx, broker.Topic{Name: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	stderr := runFails(t, dir, args...)
	if want := `changelog "` + changelog + `" has 2 partitions, sources (orders) have 3`; !strings.Contains(stderr, want) {
		t.Fatalf("with a leftover changelog the program failed with\n%s\nwant %q", stderr, want)
	}
	// The page's fix.
	if err := c.DeleteTopics(ctx, changelog); err != nil {
		t.Fatal(err)
	}
	// The failed run's static member stays until its session times out;
	// as the page says, the delete is refused until then.
	for {
		_, err := c.Admin().DeleteGroup(ctx, "settle-app")
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.NonEmptyGroup) || ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	// settlements still holds the first two runs' ten lines, and the
	// failed run's producer may have written orders before it stopped:
	// the stage settles those too, every order in orders.
	ends, err := c.Admin().ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var early int
	ends.Each(func(o kadm.ListedOffset) { early += int(o.Offset) })
	got, stderr := runUntil(t, dir, 10+early+5, args...)
	for _, line := range settled(1) {
		if n := len(slices.DeleteFunc(slices.Clone(got), func(l string) bool { return l != line })); n < 3 {
			t.Fatalf("after the fix printed %q: %q %d times, want at least 3 (two runs and this one)\nstderr:\n%s", got, line, n, stderr)
		}
	}
	if n := partitions(changelog); n != 3 {
		t.Fatalf("after the fix the changelog has %d partitions, want the sources' 3", n)
	}
}

// settled is what the program prints over runs runs on one cluster: each
// run's five settlements, sorted.
func settled(runs int) []string {
	var want []string
	for range runs {
		for i := range 5 {
			want = append(want, fmt.Sprintf("settled o-%d %d <nil>", i, 100*(i+1)))
		}
	}
	slices.Sort(want)
	return want
}

// assemble writes the page's program into a new module set up with the
// page's commands (a replace directive standing in for `go get`, as the
// module under test is this checkout) and returns its directory and the
// page.
func assemble(t *testing.T) (dir, page string) {
	t.Helper()
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	program := codeBlock(t, text, "## A first stage", "go")
	setup := codeBlock(t, text, "## Requirements", "sh")
	for _, cmd := range []string{"go mod init example.com/settle", "go get github.com/parsley-go/parsley", "go mod tidy", "go run ."} {
		if !slices.Contains(strings.Split(setup, "\n"), cmd) {
			t.Fatalf("the page's setup lacks %q:\n%s", cmd, setup)
		}
	}
	if !strings.Contains(text, "Ctrl-C") {
		t.Fatal("the page does not say how to stop the program (Ctrl-C)")
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, dir, "mod", "init", "example.com/settle")
	goCmd(t, dir, "mod", "edit", "-require=github.com/parsley-go/parsley@v0.0.0", "-replace=github.com/parsley-go/parsley="+root)
	seedSums(t, root, dir)
	goCmd(t, dir, "mod", "tidy")
	return dir, text
}

// seedSums copies the checkout's go.sum into dir. Offline, go mod tidy
// cannot ask the checksum database about the modules it adds; the
// checkout's go.sum holds their hashes, checked when they were added.
func seedSums(t *testing.T, root, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSnippetsCompile builds "A stateful stage" and, next to it as the page
// says, the test of "Testing your logic", and runs that test: the two
// blocks form one package without a clash, and the test passes.
// assemblePage writes getting started's first program to a file and
// returns the page and the file's path.
func assemblePage(t *testing.T, root string) (page, program string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	program = filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(program, []byte(codeBlock(t, string(b), "## A first stage", "go")), 0o644); err != nil {
		t.Fatal(err)
	}
	return string(b), program
}

func TestSnippetsCompile(t *testing.T) {
	skipOnRealKafka(t)
	if testing.Short() {
		t.Skip("builds a module; skipped with -short")
	}
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	dir := t.TempDir()
	for name, heading := range map[string]string{"balances.go": "## A stateful stage", "balances_test.go": "## Testing your logic"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(codeBlock(t, text, heading, "go")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "init", "example.com/balances")
	goCmd(t, dir, "mod", "edit", "-require=github.com/parsley-go/parsley@v0.0.0", "-replace=github.com/parsley-go/parsley="+root)
	seedSums(t, root, dir)
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "test", "-count=1", "-run", "TestOrderOverdraws", ".")
}

// runUntil runs `go run .` in dir until it printed n lines starting with
// "settled", interrupts it as Ctrl-C would, and returns those lines and its
// standard error. The run must end with exit status 0.
func runUntil(t *testing.T, dir string, n int, args ...string) ([]string, string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
	cmd.Dir, cmd.Env = dir, offline()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group of its own, like a shell job
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var got []string
	timeout := time.After(5 * time.Minute) // the first build may take a while
	for len(got) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("the program ended after %q:\n%s", got, stderr.String())
			}
			if strings.HasPrefix(l, "settled") {
				got = append(got, l)
			}
		case <-timeout:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("printed %q within 5 minutes, want %d settlements:\n%s", got, n, stderr.String())
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until the program closes its output
	}
	// The go command exits 1 when it was interrupted itself, as with
	// Ctrl-C in a terminal, so the program's own status shows on stderr:
	// go run adds "exit status N" when it failed, and log.Fatal its
	// message. Only the runtime's slog lines may be there.
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("after Ctrl-C: %v\n%s", err, stderr.String())
	}
	for l := range strings.Lines(stderr.String()) {
		if !strings.Contains(l, " INFO ") && !strings.Contains(l, " WARN ") {
			t.Fatalf("after Ctrl-C the program failed: %q\nstderr:\n%s", l, stderr.String())
		}
	}
	slices.Sort(got)
	return got, stderr.String()
}

// runFails runs `go run .` in dir, which must fail on its own within five
// minutes, and returns its standard error.
func runFails(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", "."}, args...)...)
	cmd.Dir, cmd.Env = dir, offline()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || ctx.Err() != nil {
		t.Fatalf("the program did not fail (%v):\n%s", err, stderr.String())
	}
	return stderr.String()
}

// goCmd runs the go command in dir, offline.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, offline()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// offline is the environment in which the module proxy cannot serve this
// module, as where no release is published: GOPRIVATE sends the go command
// straight to the module's repository, which is out of reach here, so
// only the clone's replace can provide it. Dependencies still come from
// the module cache or the proxy, as README says: a new module's minimal
// version selection may pick versions of them (kotel's own requirements,
// say) that this checkout never downloaded, so turning the proxy off
// altogether would test the cache, not the steps.
func offline() []string {
	return append(os.Environ(), "GOPRIVATE=github.com/parsley-go/*", "GIT_TERMINAL_PROMPT=0", "GOFLAGS=-mod=mod", "GOWORK=off")
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// codeBlock returns the first fenced block of lang after the heading.
func codeBlock(t *testing.T, page, heading, lang string) string {
	t.Helper()
	_, after, ok := strings.Cut(page, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("the page has no %q", heading)
	}
	_, block, ok := strings.Cut(after, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("no %s block after %q", lang, heading)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("unterminated %s block after %q", lang, heading)
	}
	return block + "\n"
}

// TestREADMEFromAClone runs README's "From a clone" steps in an empty
// directory where the module proxy cannot serve the module (offline), so
// that nothing but the clone can: the clone is this checkout (linked where the page
// clones it), main.go is getting started's program, and `go build`
// stands in for the endless `go run .`. It also checks the section's
// reason: there, `go get` of the module fails.
func TestREADMEFromAClone(t *testing.T) {
	skipOnRealKafka(t)
	if testing.Short() {
		t.Skip("builds a module; skipped with -short")
	}
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := codeBlock(t, string(readme), "### From a clone", "sh")
	_, program := assemblePage(t, root)
	home := t.TempDir()
	var script []string
	for l := range strings.Lines(steps) {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "git clone "):
			l = `mkdir -p "$HOME/src" && ln -s "` + root + `" "$HOME/src/parsley"`
		case strings.HasPrefix(l, "# write main.go"):
			l = `cp "` + program + `" main.go`
		case l == "go run .":
			l = "go build -o /dev/null ."
		}
		script = append(script, l)
	}
	if !slices.Contains(script, "go mod tidy") || !slices.Contains(script, "go build -o /dev/null .") {
		t.Fatalf("README's steps lack go mod tidy or go run .:\n%s", steps)
	}
	cmd := exec.Command("sh", "-ec", strings.Join(script, "\n"))
	// A new HOME would mean a new, empty module cache and build cache.
	env := append(offline(), "HOME="+home)
	for _, v := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	cmd.Dir, cmd.Env = home, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README's steps failed: %v\n%s\nscript:\n%s", err, out, strings.Join(script, "\n"))
	}

	dir := t.TempDir()
	goCmd(t, dir, "mod", "init", "example.com/settle")
	get := exec.Command("go", "get", "github.com/parsley-go/parsley")
	get.Dir, get.Env = dir, offline()
	if out, err := get.CombinedOutput(); err == nil {
		t.Fatalf("go get of the module succeeded where the proxy cannot serve it:\n%s", out)
	}
}

// skipOnRealKafka skips a test that needs no broker of the tier's: go test
// ./... runs it, and the real-Kafka tier need not build its modules again.
func skipOnRealKafka(t *testing.T) {
	t.Helper()
	if broker.Real() {
		t.Skip("runs without a broker, in go test ./...; the real-Kafka tier runs TestGettingStartedOnKafka")
	}
}

//go:build unix

package gettingstarted

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGettingStartedRunsTwice assembles the program of "A first stage" in a
// temporary module, set up with the page's commands (a replace directive
// standing in for `go get`, as the module under test is this checkout),
// and runs it twice in a row with the page's `go run .`, stopping it as the
// page says (Ctrl-C: an interrupt to its process group). Both runs must
// print the five settlements and exit 0. The second run finds the first
// run's state directory and a new embedded cluster: it must wipe the stale
// stores with a WARN, not stop with "changelog ends before the store's
// checkpoint".
//
// It compiles a module (sharing the build cache), so -short skips it.
func TestGettingStartedRunsTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the getting-started program; skipped with -short")
	}
	root := moduleRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
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

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, dir, "mod", "init", "example.com/settle")
	goCmd(t, dir, "mod", "edit", "-require=github.com/parsley-go/parsley@v0.0.0", "-replace=github.com/parsley-go/parsley="+root)
	goCmd(t, dir, "mod", "tidy")

	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("settled o-%d %d <nil>", i, 100*(i+1)))
	}
	for run := 1; run <= 2; run++ {
		got, stderr := runUntil(t, dir, len(want))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("run %d printed %q, want %q\nstderr:\n%s", run, got, want, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "state", "instance-1")); err != nil {
			t.Fatalf("run %d: no state directory: %v", run, err)
		}
		if run == 2 && !strings.Contains(stderr, "task store wiped") {
			t.Fatalf("run 2 on a new cluster did not report wiping the stale stores:\n%s", stderr)
		}
	}
}

// runUntil runs `go run .` in dir until it printed n lines starting with
// "settled", interrupts it as Ctrl-C would, and returns those lines and its
// standard error. The run must end with exit status 0.
func runUntil(t *testing.T, dir string, n int) ([]string, string) {
	t.Helper()
	cmd := exec.Command("go", "run", ".")
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
	return got, stderr.String()
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

// offline is the environment with the module proxy off: every module the
// program needs is this checkout's, already in the module cache.
func offline() []string {
	return append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
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

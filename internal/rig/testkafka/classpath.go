package testkafka

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Classpath returns the Kafka broker's classpath, resolving it with Maven
// from the launcher's pom.xml, beside this file, when target/classpath.txt
// beside it is missing or older than the pom. Maven downloads the jars into
// its own repository (~/.m2) on first use; nothing lands in the source tree
// but target/, which is ignored.
func Classpath(ctx context.Context) (string, error) {
	dir, err := launcherDir()
	if err != nil {
		return "", err
	}
	pom := filepath.Join(dir, "pom.xml")
	out := filepath.Join(dir, "target", "classpath.txt")
	if fresh(out, pom) {
		return readClasspath(out)
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoJava, err)
	}
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", pom,
		"dependency:build-classpath", "-Dmdep.outputFile="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testkafka: resolve the broker's classpath with %s: %w\n%s", pom, err, b)
	}
	return readClasspath(out)
}

func readClasspath(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("testkafka: %w", err)
	}
	cp := strings.TrimSpace(string(b))
	if cp == "" {
		return "", fmt.Errorf("testkafka: %s is empty", path)
	}
	return cp, nil
}

func fresh(out, src string) bool {
	o, err := os.Stat(out)
	if err != nil {
		return false
	}
	s, err := os.Stat(src)
	return err == nil && o.ModTime().After(s.ModTime())
}

// launcherDir finds this package's directory, internal/rig/testkafka
// under the module's go.mod (walking up from the working directory: go
// test runs in a package's directory, the command anywhere in the tree),
// or takes it from PARSLEY_TESTKAFKA_DIR.
func launcherDir() (string, error) {
	if d := os.Getenv("PARSLEY_TESTKAFKA_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testkafka: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			p := filepath.Join(d, "internal", "rig", "testkafka")
			if _, err := os.Stat(filepath.Join(p, "pom.xml")); err != nil {
				return "", fmt.Errorf("testkafka: no launcher pom beside %s: %w", filepath.Join(d, "go.mod"), err)
			}
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("testkafka: no go.mod above %s", wd)
		}
	}
}

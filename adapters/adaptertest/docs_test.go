package adaptertest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsBlocksMatchTheirTests holds docs/plain-clients.md to the code its
// tests run: every Go block marked `<!-- tested: FILE NAME -->` must equal,
// line for line, the region of FILE between `// docs:begin NAME` and
// `// docs:end NAME`; every such region must be shown on the page; and
// each client — franz-go and the three adapters — must have one. The
// regions are what TestTxnDocsPipeline (in each adapter's module) and
// TestTxnDocsPipelineWithFranzGo run through the order/payment pipeline.
func TestDocsBlocksMatchTheirTests(t *testing.T) {
	const root = "../.."
	page, err := os.ReadFile(filepath.Join(root, "docs/plain-clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`^<!-- tested: (\S+) (\S+) -->$`)
	lines := strings.Split(string(page), "\n")
	shown := map[string]bool{}
	files := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		file, name := m[1], m[2]
		if i+1 >= len(lines) || lines[i+1] != "```go" {
			t.Errorf("line %d: the marker for %s %s is not followed by a ```go block", i+1, file, name)
			continue
		}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 {
			t.Fatalf("line %d: the ```go block never ends", i+2)
		}
		block := strings.Join(lines[i+2:i+2+end], "\n")
		region, err := docsRegion(filepath.Join(root, file), name)
		if err != nil {
			t.Error(err)
			continue
		}
		if block != region {
			t.Errorf("docs/plain-clients.md line %d: the block for %s differs from %s's docs region:\n%s", i+3, name, file, diff(block, region))
		}
		shown[file+" "+name] = true
		files[file] = true
	}
	for _, want := range []string{
		"adapters/adaptertest/pipeline_test.go franz-go",
		"adapters/saramaclock/docs_test.go sarama",
		"adapters/kafkagoclock/docs_test.go kafka-go",
		"adapters/confluentclock/docs_test.go confluent-kafka-go",
	} {
		if !shown[want] {
			t.Errorf("docs/plain-clients.md shows no tested block %s", want)
		}
		files[strings.Fields(want)[0]] = true
	}
	// Every region a test file marks must be on the page, or it is a
	// block that drifted off it.
	begin := regexp.MustCompile(`(?m)^// docs:begin (\S+)$`)
	for file := range files {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range begin.FindAllStringSubmatch(string(src), -1) {
			if !shown[file+" "+m[1]] {
				t.Errorf("%s marks a docs region %q that docs/plain-clients.md does not show", file, m[1])
			}
		}
	}
}

// docsRegion returns the lines of file between `// docs:begin name` and
// `// docs:end name`, without the blank lines that end it.
func docsRegion(file, name string) (string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	text := string(src)
	b := strings.Index(text, "// docs:begin "+name+"\n")
	e := strings.Index(text, "// docs:end "+name+"\n")
	if b < 0 || e < b {
		return "", fmt.Errorf("%s has no docs region %s (// docs:begin %[2]s ... // docs:end %[2]s)", file, name)
	}
	return strings.TrimRight(text[b+len("// docs:begin "+name+"\n"):e], "\n"), nil
}

// diff names the first line where a and b differ.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("  line %d of the block:\n  page: %q\n  code: %q", i+1, x, y)
		}
	}
	return "  (equal)"
}

package main

import (
	"testing"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

// TestCommandLine: --help exits 0 and documents every flag, PARSLEY_BROKERS
// is honoured, and a bad value is refused with a message naming it.
func TestCommandLine(t *testing.T) {
	extest.CommandLine(t, command(), []string{"-requests"}, []string{"--requests", "0"}, "invalid --requests 0")
}

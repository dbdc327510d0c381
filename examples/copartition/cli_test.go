package main

import (
	"testing"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

// TestCommandLine: copartition has the command line of every example:
// --help exits 0 and documents every flag, PARSLEY_BROKERS is honoured, and
// a bad value is refused with exit 2 and a message naming it.
func TestCommandLine(t *testing.T) {
	extest.CommandLine(t, command(), []string{"-partitioner", "-orders", "intended broken case"}, []string{"--partitioner", "crc32"}, `invalid --partitioner "crc32": want murmur2 or fnv`)
}

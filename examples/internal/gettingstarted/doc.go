// Package gettingstarted holds the test that follows docs/getting-started.md
// literally: it assembles the page's program in a new module, runs it
// twice with the page's own command, and checks what it prints.
package gettingstarted

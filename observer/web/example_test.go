package web_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/parsley-go/parsley/observer/web"
)

// Acknowledging needs an access file; without one every write is refused.
func ExampleLoadAccess() {
	dir, _ := os.MkdirTemp("", "access-example-")
	defer os.RemoveAll(dir)
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("# identity token\nci-bot 9f86d081884c7d659a2feaa0c55ad015\n"), 0o600)
	a, err := web.LoadAccess(tokens, "")
	fmt.Println(a != nil, err)
	none, err := web.LoadAccess("", "")
	fmt.Println(none == nil, err)
	os.WriteFile(tokens, []byte("ci-bot short\n"), 0o600)
	_, err = web.LoadAccess(tokens, "")
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true <nil>
	// true
}

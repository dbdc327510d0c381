package stagetest_test

import (
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/stage/stagetest"
)

// exampleTB stands in for *testing.T outside a test function.
type exampleTB struct{ cleanups []func() }

func (*exampleTB) Helper()                           {}
func (*exampleTB) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
func (e *exampleTB) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "stagetest-example")
	if err != nil {
		log.Fatal(err)
	}
	e.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
func (e *exampleTB) done() {
	for _, f := range slices.Backward(e.cleanups) {
		f()
	}
}

// Run a stage on an in-process broker: pipe typed records in, read decoded
// outputs, and move the wall clock to fire ticks. In a test, pass t.
func ExampleNew() {
	t := &exampleTB{}
	defer t.done()
	words := stage.NewTopic("words", stage.String(), stage.String())
	shouts := stage.NewTopic("shouts", stage.String(), stage.String())
	st := stage.On(stage.Named("shout"), words, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{shouts.Send(m.Key, strings.ToUpper(m.Value))}, nil
	}).Ticks(time.Hour, func(tk stage.Tick) ([]stage.Emission, error) {
		return []stage.Emission{shouts.Send("clock", tk.Time.UTC().Format(time.Kitchen))}, nil
	}).Into(shouts).MustBuild()

	d := stagetest.New(t, []*stage.Stage{st}, stagetest.StartTime(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	stagetest.Send(d, words, "k", "hello")
	o := stagetest.Read(d, shouts, 1)[0]
	fmt.Println(o.Key, o.Value)
	d.AdvanceWallClock(time.Hour)
	o = stagetest.Read(d, shouts, 1)[0]
	fmt.Println(o.Key, o.Value)
	// Output:
	// k HELLO
	// clock 10:00AM
}

// AliasingInt64 decodes a view of the bytes it is given, and the view's
// Add writes into them: the runtime must hand a fold bytes it keeps no
// other use for.
func ExampleAliasingInt64() {
	c := stagetest.AliasingInt64()
	stored := []byte{0, 0, 0, 0, 0, 0, 0, 41}
	v, _ := c.Decode(stored)
	v.Add(1)
	enc, _ := c.Encode(v)
	fmt.Println(v.Value(), stored[7], &enc[0] == &stored[0])
	// Output: 42 42 true
}

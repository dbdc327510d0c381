// Command read-your-writes shows causally consistent reads of a stage's
// state. An HTTP order service writes each order, stamped by a
// clock.Clock, to the "orders" topic and answers with the writer's causal
// token; an "order-state" stage folds orders into per-order state; a view
// of that stage serves the state over HTTP (view.Handler). The client
// reads each order right after writing it, once without the token and
// once with it: the read with the token waits until the stage's state
// reflects the write, so it is never stale; the read without may be.
//
//	client ─POST─► order service ─► orders ─► order-state ─► changelog ─► view ◄─GET─ client
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	appName   = "read-your-writes"
	stageName = "order-state"
	clients   = 8 // concurrent clients
)

// Order is one order's state as the stage folds it.
type Order struct {
	Total int64 `json:"total"`
	Items int   `json:"items"`
}

// ErrStale: a read with a token returned state older than the write.
var ErrStale = errors.New("read-your-writes: a read with a token was stale")

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var n int
	return excli.Command{
		Name:    "read-your-writes",
		Summary: "Writes orders through an HTTP service and reads each one back through a view of the stage's\nstate, with the writer's causal token and without: reads with the token are never stale.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&n, "requests", 1000, "how many orders to write and read back (1 to 100000)")
			return func() error { return excli.IntRange("requests", n, 1, 100000) }
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, n) },
	}
}

func run(ctx context.Context, out io.Writer, t excli.Target, n int) error {
	app := t.Name(appName)
	orders := stage.NewTopic(t.Name("orders"), stage.String(), stage.Int64())
	b := stage.WithState(stage.Named(stageName), stage.JSON[Order](), Order{})
	stage.OnFold(b, orders, func(o Order, m stage.Message[string, int64]) (stage.Step[Order], error) {
		o.Total += m.Value
		o.Items++
		return stage.Next(o), nil
	})
	st := b.MustBuild()

	const parts = 3
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: orders.Name(), Partitions: parts},
		excluster.Topic{Name: stage.ChangelogTopic(app, stageName), Partitions: parts, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, stop, err := cl.StartApp(ctx, app, st)
	if err != nil {
		return err
	}
	defer stop()

	// The view: a replica of the stage's state, served over HTTP.
	v, err := view.New(view.Config{ApplicationID: app, Stage: stageName, Brokers: cl.Addrs}, stage.String(), stage.JSON[Order]())
	if err != nil {
		return err
	}
	vctx, vstop := context.WithCancel(ctx)
	vdone := make(chan error, 1)
	go func() { vdone <- v.Run(vctx) }()
	defer func() { vstop(); <-vdone }()
	vh, err := view.Handler(v, view.HandlerOptions[string]{MaxWait: 30 * time.Second})
	if err != nil {
		return err
	}

	// The order service: writes an order, stamped, and answers with the
	// writer's token.
	writer, err := cl.NewClient()
	if err != nil {
		return err
	}
	defer writer.Close()
	clk := clock.New(cl.Admin)
	defer clk.Close()
	var writeMu sync.Mutex // one clock, folded in send order
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		amount, err := strconv.ParseInt(r.URL.Query().Get("amount"), 10, 64)
		if err != nil {
			http.Error(w, "bad amount", http.StatusBadRequest)
			return
		}
		val, _ := stage.Int64().Encode(amount)
		rec := &kgo.Record{Topic: orders.Name(), Key: []byte(r.PathValue("id")), Value: val}
		writeMu.Lock()
		defer writeMu.Unlock()
		if err := clk.Stamp(r.Context(), rec); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := writer.ProduceSync(r.Context(), rec).FirstErr(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := clk.RecordProduced(rec); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set(view.TokenHeader, view.TokenOf(clk.Snapshot()).String())
		w.WriteHeader(http.StatusCreated)
	})
	mux.Handle("/", vh)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "order service and view on %s\n", base)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = v.WaitReady(wctx)
	cancel()
	if err != nil {
		return err
	}

	var staleWith, staleWithout atomic.Int64
	jobs := make(chan int)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: time.Minute}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				without, with, err := request(ctx, hc, base, i)
				if err != nil {
					errs <- err
					return
				}
				if without {
					staleWithout.Add(1)
				}
				if with {
					staleWith.Add(1)
				}
			}
		}()
	}
	var ferr error
feed:
	for i := 1; i <= n; i++ {
		select {
		case jobs <- i:
		case ferr = <-errs:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if ferr == nil {
		select {
		case ferr = <-errs:
		default:
		}
	}
	if ferr != nil {
		return ferr
	}
	fmt.Fprintf(out, "read-your-writes: %d reads with token, %d stale; %d of %d reads without token stale\n",
		n, staleWith.Load(), staleWithout.Load(), n)
	if staleWith.Load() > 0 {
		return fmt.Errorf("%w: %d of %d", ErrStale, staleWith.Load(), n)
	}
	return nil
}

// request writes order i and reads it back without, then with, the token;
// it reports which read was stale (did not show the order).
func request(ctx context.Context, hc *http.Client, base string, i int) (staleWithout, staleWith bool, err error) {
	id := "o-" + strconv.Itoa(i)
	amount := int64(i)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders/"+id+"?amount="+strconv.FormatInt(amount, 10), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return false, false, fmt.Errorf("write %s: %w", id, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return false, false, fmt.Errorf("write %s: %s", id, resp.Status)
	}
	tok := resp.Header.Get(view.TokenHeader)
	fresh := func(o Order, ok bool) bool { return ok && o.Items == 1 && o.Total == amount }
	o, ok, err := read(ctx, hc, base, id, "")
	if err != nil {
		return false, false, err
	}
	staleWithout = !fresh(o, ok)
	o, ok, err = read(ctx, hc, base, id, tok)
	if err != nil {
		return false, false, err
	}
	return staleWithout, !fresh(o, ok), nil
}

func read(ctx context.Context, hc *http.Client, base, id, tok string) (Order, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/state/"+id, nil)
	if tok != "" {
		req.Header.Set(view.TokenHeader, tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Order{}, false, fmt.Errorf("read %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return Order{}, false, nil
	case http.StatusOK:
	default:
		return Order{}, false, fmt.Errorf("read %s (token %t): %s: %s", id, tok != "", resp.Status, body)
	}
	var o Order
	if err := json.Unmarshal(body, &o); err != nil {
		return Order{}, false, fmt.Errorf("read %s: %w", id, err)
	}
	return o, true, nil
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/buildinfo"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
)

// Flags are built afresh for each command: urfave/cli records parse state
// in them.
func brokersFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "brokers", Aliases: []string{"b"}, EnvVars: []string{"PARSLEY_BROKERS"},
		Usage: "seed brokers, host:port (comma-separated or repeated)"}
}

func topicsFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "topics", Aliases: []string{"t"}, Usage: "topic names to observe"}
}

func patternFlag() cli.Flag {
	return &cli.StringFlag{Name: "pattern", Usage: "observe every topic whose name matches this regular expression (internal topics excluded)"}
}

func fromFlag() cli.Flag {
	return &cli.StringFlag{Name: "from", Value: "start", Usage: "where to begin on partitions without a stored position: start, end, a time (RFC 3339) or a duration ago (e.g. 2h)"}
}

func uncommittedFlag() cli.Flag {
	return &cli.BoolFlag{Name: "read-uncommitted", Usage: "also fetch records of open and aborted transactions"}
}

func depthFlag() cli.Flag {
	return &cli.IntFlag{Name: "depth", Value: 1000, Usage: "maximum distance from the record (at least 1)"}
}

func limitFlag() cli.Flag {
	return &cli.IntFlag{Name: "limit", Value: 5000, Usage: "maximum records in the graph (at least 1)"}
}

// ackFlags say who may acknowledge findings through serve's web server
// and API, and how long closed findings are kept.
func ackFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ack-tokens-file", EnvVars: []string{"PARSLEY_OBSERVER_ACK_TOKENS_FILE"},
			Usage: "file of bearer tokens that may acknowledge findings, one per line, optionally after the identity they stand for (\"ci-bot TOKEN\")"},
		&cli.StringFlag{Name: "ack-users-file", EnvVars: []string{"PARSLEY_OBSERVER_ACK_USERS_FILE"},
			Usage: "file of users that may acknowledge findings with basic auth, \"user:bcrypt-hash\" lines (htpasswd -nB USER)"},
		&cli.DurationFlag{Name: "closed-retention", Value: 30 * 24 * time.Hour,
			Usage: "delete resolved findings and their history this long after they resolved (0: keep)"},
	}
}

// ackConfig reads the ackFlags: without an access file acknowledging is
// refused.
func ackConfig(c *cli.Context) (*web.Access, time.Duration, error) {
	ret := c.Duration("closed-retention")
	if ret < 0 {
		return nil, 0, cli.Exit(fmt.Sprintf("--closed-retention %v: want a duration of 0 or more", ret), 2)
	}
	a, err := web.LoadAccess(c.String("ack-tokens-file"), c.String("ack-users-file"))
	if err != nil {
		return nil, 0, cli.Exit(err.Error(), 2)
	}
	return a, ret, nil
}

// dbFlag is --db. The read commands check it is set themselves rather
// than mark it Required: urfave/cli checks required flags before the
// config file is applied, so a Required flag could not come from there.
func dbFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "db", EnvVars: []string{"PARSLEY_OBSERVER_DB"}, Usage: "SQLite store path"}
}

// usageError makes a command-line parse error exit 2, as the other usage
// errors do.
func usageError(_ *cli.Context, err error, _ bool) error { return cli.Exit(err.Error(), 2) }

func app() *cli.App {
	a := &cli.App{
		Name:         "parsley-observe",
		Usage:        "rebuild causal graphs from Parsley-stamped Kafka topics and flag stamp gaps and late-joiner windows",
		HideVersion:  true,
		OnUsageError: usageError,
		// main prints every error, so each gets the same prefix; urfave/cli
		// would print an ExitCoder's message bare and exit itself.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags:          []cli.Flag{&cli.BoolFlag{Name: "version", Aliases: []string{"V"}, Usage: "print the version and exit"}},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				fmt.Fprintln(c.App.Writer, buildinfo.String("parsley-observe"))
				return nil
			}
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("unknown command %q (see parsley-observe --help)", c.Args().First()), 2)
			}
			cli.ShowAppHelp(c)
			return cli.Exit("", 2)
		},
		Commands: []*cli.Command{
			{
				Name: "serve", Usage: "tail topics and serve the web UI, JSON API, /metrics, /livez and /readyz",
				Flags: append([]cli.Flag{brokersFlag(), topicsFlag(), patternFlag(), fromFlag(), uncommittedFlag(),
					&cli.StringFlag{Name: "db", Value: "observer.db", EnvVars: []string{"PARSLEY_OBSERVER_DB"}, Usage: "SQLite store path; kept across restarts"},
					&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "HTTP listen address"},
					&cli.StringFlag{Name: "http-tls-cert", Usage: "serve HTTPS with this PEM certificate (chain), reloaded when the file changes (with --http-tls-key)"},
					&cli.StringFlag{Name: "http-tls-key", Usage: "PEM private key of --http-tls-cert"},
					&cli.BoolFlag{Name: "no-payloads", Usage: "never show record keys, values or headers in the UI (for sensitive payloads)"},
					&cli.DurationFlag{Name: "refresh", Value: 10 * time.Second, Usage: "how often to probe the cluster (health, new topics, lag); bounds how long a lost cluster goes unreported"},
					&cli.DurationFlag{Name: "max-age", Usage: "prune records older than this (0: keep)"},
					&cli.Int64Flag{Name: "max-records", Value: 5_000_000, Usage: "prune the oldest records beyond this many (0: keep)"}},
					append(ackFlags(), groupFlags()...)...),
				Action: serve,
			},
			{
				Name: "ack", Usage: "acknowledge a finding through a serving observer's API, recording who and why", ArgsUsage: "FINDING-ID",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "url", Value: "http://127.0.0.1:8080", EnvVars: []string{"PARSLEY_OBSERVER_URL"}, Usage: "the serving observer's address"},
					&cli.StringFlag{Name: "reason", Usage: "why: what is known and what is being done (kept in the finding's history)"},
					&cli.StringFlag{Name: "token-file", EnvVars: []string{"PARSLEY_OBSERVER_TOKEN_FILE"}, Usage: "file holding a bearer token the server's --ack-tokens-file names"},
					&cli.StringFlag{Name: "user", Usage: "user of the server's --ack-users-file (password from --password-file)"},
					&cli.StringFlag{Name: "password-file", Usage: "file holding --user's password"},
					&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long"}},
				Action: ack,
			},
			{
				Name: "scan", Usage: "read the topics once, print findings, exit 1 if any is at or above --fail-on",
				Flags: []cli.Flag{brokersFlag(), topicsFlag(), patternFlag(), fromFlag(), uncommittedFlag(), dbFlag(),
					&cli.StringFlag{Name: "fail-on", Value: "warning", Usage: "lowest severity that fails the scan: info, warning or error"},
					&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
					&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up after this long"}},
				Action: scan,
			},
			{
				Name: "explain", Usage: "print a record's ancestry (or descendants) as a tree", ArgsUsage: "TOPIC/PARTITION@OFFSET",
				Flags:  []cli.Flag{dbFlag(), depthFlag(), limitFlag(), &cli.BoolFlag{Name: "descendants", Usage: "walk what the record caused instead"}},
				Action: explain,
			},
			{
				Name: "graph", Usage: "write a record's ancestry or descendants as DOT or JSON", ArgsUsage: "TOPIC/PARTITION@OFFSET",
				Flags: []cli.Flag{dbFlag(), depthFlag(), limitFlag(),
					&cli.StringFlag{Name: "format", Value: "dot", Usage: "dot or json"},
					&cli.StringFlag{Name: "direction", Value: "ancestry", Usage: "ancestry, descendants or both"}},
				Action: graph,
			},
			{
				Name: "decode", Usage: "decode a stamp given as hex or base64, or the stamp of a record by coordinate", ArgsUsage: "[VALUE]",
				Flags: []cli.Flag{brokersFlag(),
					&cli.StringFlag{Name: "header", Usage: "the value's header: vc or parsley.causes (default: try both)"},
					&cli.StringFlag{Name: "coord", Usage: "decode the record at TOPIC/PARTITION@OFFSET, read from the brokers"}},
				Action: decode,
			},
			{
				Name: "demo", Usage: "start an embedded broker with a small topology (a deliberate gap and a late-joiner window) and serve the UI",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "HTTP listen address"}},
				Action: demo,
			},
		},
	}
	for _, c := range a.Commands {
		c.OnUsageError = usageError
	}
	finishFlags(a)
	return a
}

func brokers(c *cli.Context) ([]string, error) {
	var out []string
	for _, b := range c.StringSlice("brokers") {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, cli.Exit("no brokers: set --brokers or PARSLEY_BROKERS", 2)
	}
	return out, nil
}

func config(c *cli.Context) (observer.Config, error) {
	seeds, err := brokers(c)
	if err != nil {
		return observer.Config{}, err
	}
	opts, err := clientOpts(c)
	if err != nil {
		return observer.Config{}, err
	}
	// serve reports its progress; the one-shot commands only what goes wrong.
	level := slog.LevelWarn
	if c.Command.Name == "serve" {
		level = slog.LevelInfo
	}
	cfg := observer.Config{Brokers: seeds, Topics: c.StringSlice("topics"), ReadUncommitted: c.Bool("read-uncommitted"),
		ClientOpts: opts, Logger: newLogger(c, level)}
	if p := c.String("pattern"); p != "" {
		if cfg.Pattern, err = regexp.Compile(p); err != nil {
			return cfg, cli.Exit(fmt.Sprintf("--pattern %q: %v", p, err), 2)
		}
	}
	if len(cfg.Topics) == 0 && cfg.Pattern == nil {
		return cfg, cli.Exit("no topics: set --topics or --pattern", 2)
	}
	switch from := c.String("from"); from {
	case "", "start":
	case "end":
		cfg.Start = observer.FromEnd
	default:
		if t, err := time.Parse(time.RFC3339, from); err == nil {
			cfg.StartTime = t
		} else if d, err := time.ParseDuration(from); err == nil && d > 0 {
			cfg.StartTime = time.Now().Add(-d)
		} else {
			return cfg, cli.Exit(fmt.Sprintf("--from %q: want start, end, an RFC 3339 time or a positive duration", from), 2)
		}
	}
	return cfg, nil
}

// openStore opens --db for writing (creating it), or a store in a fresh
// temporary directory that cleanup removes.
func openStore(c *cli.Context) (*observer.Store, func(), error) {
	path := c.String("db")
	cleanup := func() {}
	if path == "" {
		dir, err := os.MkdirTemp("", "parsley-observe-")
		if err != nil {
			return nil, nil, err
		}
		path, cleanup = filepath.Join(dir, "observer.db"), func() { os.RemoveAll(dir) }
	}
	st, err := observer.OpenStore(c.Context, path)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return st, func() { st.Close(); cleanup() }, nil
}

// openStoreReadOnly opens --db for the commands that only read it: it
// writes nothing to the file and refuses one that is not an observer store.
func openStoreReadOnly(c *cli.Context) (*observer.Store, error) {
	path := c.String("db")
	if path == "" {
		return nil, cli.Exit("--db: required: the store path (set --db, PARSLEY_OBSERVER_DB or db in the --config file)", 2)
	}
	st, err := observer.OpenStoreReadOnly(c.Context, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, cli.Exit(fmt.Sprintf("--db %s: no such file (build one with `parsley-observe scan --db` or `serve --db`)", path), 2)
	}
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	return st, nil
}

// limits reads --depth and --limit.
func limits(c *cli.Context) (observer.Limits, error) {
	lim := observer.Limits{Depth: c.Int("depth"), Nodes: c.Int("limit")}
	if lim.Depth < 1 {
		return lim, cli.Exit(fmt.Sprintf("--depth %d: want at least 1", lim.Depth), 2)
	}
	if lim.Nodes < 1 {
		return lim, cli.Exit(fmt.Sprintf("--limit %d: want at least 1", lim.Nodes), 2)
	}
	return lim, nil
}

func scan(c *cli.Context) error {
	failOn, err := observer.ParseSeverity(c.String("fail-on"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	format := c.String("format")
	if format != "text" && format != "json" {
		return cli.Exit(fmt.Sprintf("--format %q: want text or json", format), 2)
	}
	cfg, err := config(c)
	if err != nil {
		return err
	}
	st, done, err := openStore(c)
	if err != nil {
		return err
	}
	defer done()
	o, err := observer.New(cfg, st)
	if err != nil {
		return err
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	if err := o.Scan(ctx); err != nil {
		return err
	}
	fs, err := o.Findings(ctx)
	if err != nil {
		return err
	}
	// Acknowledged and resolved findings (a --db kept across scans) do
	// not fail the scan; they are listed with their state.
	failed := 0
	for _, f := range fs {
		if f.Open() && f.Severity >= failOn {
			failed++
		}
	}
	w := c.App.Writer
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if fs == nil {
			fs = []observer.Finding{}
		}
		enc.Encode(fs)
	} else {
		for _, f := range fs {
			fmt.Fprintf(w, "%-7s %-23s #%d %s\n        coordinates: %s\n        action: %s\n", f.Severity, f.Code, f.ID, f.Summary, strings.Join(f.Names, " "), f.Action)
			switch {
			case f.Resolved != nil:
				fmt.Fprintf(w, "        resolved %s: %s\n", f.Resolved.At.Format(time.RFC3339), f.Resolved.Why)
			case f.Ack != nil:
				fmt.Fprintf(w, "        acknowledged by %s %s: %s\n", f.Ack.By, f.Ack.At.Format(time.RFC3339), f.Ack.Reason)
			}
		}
		fmt.Fprintf(w, "%d findings, %d open at or above %s\n", len(fs), failed, failOn)
	}
	if failed > 0 {
		return cli.Exit("", 1)
	}
	return nil
}

// serve checks every flag, then binds the listener, and only then creates
// or opens the store: a bad flag or a taken port leaves no file behind.
func serve(c *cli.Context) error {
	cfg, err := config(c)
	if err != nil {
		return err
	}
	cfg.MaxAge, cfg.MaxRecords, cfg.Refresh = c.Duration("max-age"), c.Int64("max-records"), c.Duration("refresh")
	if cfg.Refresh <= 0 {
		return cli.Exit(fmt.Sprintf("--refresh %v: want a positive duration", cfg.Refresh), 2)
	}
	if cfg.MaxAge < 0 {
		return cli.Exit(fmt.Sprintf("--max-age %v: want a positive duration, or 0 to keep records of any age", cfg.MaxAge), 2)
	}
	if cfg.MaxRecords < 0 {
		return cli.Exit(fmt.Sprintf("--max-records %d: want a positive count, or 0 to keep any number", cfg.MaxRecords), 2)
	}
	access, retention, err := ackConfig(c)
	if err != nil {
		return err
	}
	cfg.ClosedRetention = retention
	if err := groupConfig(c, &cfg); err != nil {
		return err
	}
	path := c.String("db")
	if path == "" {
		return cli.Exit("--db: want a store path", 2)
	}
	ln, err := listen(c)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.Group != "" && cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = advertise(ln)
	}
	st, err := observer.OpenStore(c.Context, path)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.Logger.Info("store", "path", path)
	o, err := observer.New(cfg, st)
	if err != nil {
		return err
	}
	defer o.Close()
	return runServer(c.Context, ln, o, serveOptions{Payloads: !c.Bool("no-payloads"), Access: access, Logger: cfg.Logger}, c.App.Writer)
}

// serveOptions are how runServer serves the UI and API.
type serveOptions struct {
	Payloads bool         // record pages preview keys and values
	Access   *web.Access  // who may acknowledge findings; nil: nobody
	Logger   *slog.Logger // the server's errors, acknowledgements and refused writes
}

// runServer serves o's store on ln while o tails, until ctx ends or
// either fails, as opts say. It returns only after both have stopped, so
// the caller's deferred closes of the observer and its store never race
// the ingest.
func runServer(ctx context.Context, ln *listener, o *observer.Observer, opts serveOptions, out io.Writer) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.Collector())
	registerProcessMetrics(reg)
	var payload func(context.Context, headers.Coordinate) (*observer.Payload, error)
	if opts.Payloads {
		payload = o.Payload
	}
	h, err := web.New(web.Config{Store: o.Store(), Findings: o.Findings, Gatherer: reg, Health: o.Health, Payload: payload,
		Access: opts.Access, Logger: opts.Logger, Acknowledge: o.Acknowledge, Locate: o.Locate, Shards: o.Shards})
	if err != nil {
		return err
	}
	// The server's own complaints (failed handshakes, bad requests) go to
	// the command's log, in its format.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: ln.tls,
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)}
	fmt.Fprintf(out, "parsley-observe: serving %s\n", ln.URL())
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	serveErr, runErr := make(chan error, 1), make(chan error, 1)
	go func() {
		if ln.tls != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	go func() { runErr <- o.Run(ctx) }()
	var served, ingested bool
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		served = true
	case err = <-runErr:
		ingested = true
	}
	stop()
	if !ingested {
		if rerr := <-runErr; err == nil || errors.Is(err, http.ErrServerClosed) {
			err = rerr
		}
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	if !served {
		<-serveErr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func parseTarget(c *cli.Context, st *observer.Store) (headers.Coordinate, error) {
	if c.NArg() != 1 {
		return headers.Coordinate{}, cli.Exit("want one argument: TOPIC/PARTITION@OFFSET", 2)
	}
	ref, err := observer.ParseRef(c.Args().First())
	if err != nil {
		return headers.Coordinate{}, cli.Exit(err.Error(), 2)
	}
	return st.Resolve(c.Context, ref)
}

// byName returns err as an exit error whose message names topics and
// senders as the store knows them.
func byName(ctx context.Context, st *observer.Store, err error) error {
	names, nerr := st.Names(ctx)
	if nerr != nil {
		return err
	}
	return cli.Exit(names.Text(err.Error()), 2)
}

func explain(c *cli.Context) error {
	lim, err := limits(c)
	if err != nil {
		return err
	}
	st, err := openStoreReadOnly(c)
	if err != nil {
		return err
	}
	defer st.Close()
	at, err := parseTarget(c, st)
	if err != nil {
		return err
	}
	walk := st.Ancestry
	if c.Bool("descendants") {
		walk = st.Descendants
	}
	g, err := walk(c.Context, at, lim)
	if err != nil {
		return byName(c.Context, st, err)
	}
	return g.WriteTree(c.App.Writer)
}

func graph(c *cli.Context) error {
	lim, err := limits(c)
	if err != nil {
		return err
	}
	d, f := c.String("direction"), c.String("format")
	if d != "ancestry" && d != "descendants" && d != "both" {
		return cli.Exit(fmt.Sprintf("--direction %q: want ancestry, descendants or both", d), 2)
	}
	if f != "dot" && f != "json" {
		return cli.Exit(fmt.Sprintf("--format %q: want dot or json", f), 2)
	}
	st, err := openStoreReadOnly(c)
	if err != nil {
		return err
	}
	defer st.Close()
	at, err := parseTarget(c, st)
	if err != nil {
		return err
	}
	var g *observer.Graph
	switch d {
	case "ancestry":
		g, err = st.Ancestry(c.Context, at, lim)
	case "descendants":
		g, err = st.Descendants(c.Context, at, lim)
	default:
		g, err = st.Both(c.Context, at, lim)
	}
	if err != nil {
		return byName(c.Context, st, err)
	}
	if f == "json" {
		return g.WriteJSON(c.App.Writer)
	}
	return g.WriteDOT(c.App.Writer)
}

func decode(c *cli.Context) error {
	w := c.App.Writer
	noName := func(headers.TopicID) string { return "" }
	if coord := c.String("coord"); coord != "" {
		if c.NArg() > 0 {
			return cli.Exit("give either a VALUE or --coord, not both", 2)
		}
		seeds, err := brokers(c)
		if err != nil {
			return err
		}
		opts, err := clientOpts(c)
		if err != nil {
			return err
		}
		ref, err := observer.ParseRef(coord)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		rec, err := observer.FetchRecord(c.Context, seeds, ref, opts...)
		if err != nil {
			return err
		}
		names, err := observer.ListNames(c.Context, seeds, opts...)
		if err != nil {
			return err
		}
		var st headers.Stamp
		if err := headers.ReadStamp(&st, rec.Headers); err != nil {
			fmt.Fprintf(w, "record %s: undecodable stamp: %v\n", ref, err)
			for _, h := range rec.Headers {
				if headers.IsReserved(h.Key) {
					fmt.Fprintf(w, "  header %s = %x\n", h.Key, h.Value)
				}
			}
			return cli.Exit("", 1)
		}
		fmt.Fprintf(w, "record %s (topic %q)\n", ref, rec.Topic)
		if st.Tagged {
			if n := names.SenderName(st.Sender); n != "" {
				fmt.Fprintf(w, "sender %s (%s) seq %d\n", n, st.Sender, st.Seq)
			} else {
				fmt.Fprintf(w, "sender %s seq %d\n", st.Sender, st.Seq)
			}
		}
		return names.WriteClock(w, &st.Clock)
	}
	if c.NArg() != 1 {
		return cli.Exit("want a stamp VALUE (hex or base64) or --coord TOPIC/PARTITION@OFFSET", 2)
	}
	clk, hdr, err := observer.DecodeValue(c.Args().First(), c.String("header"))
	if err != nil {
		fmt.Fprintln(w, err)
		return cli.Exit("", 1)
	}
	fmt.Fprintf(w, "%s: ", hdr)
	return observer.WriteClock(w, clk, noName)
}

func demo(c *cli.Context) error {
	ctx := c.Context
	log := newLogger(c, slog.LevelInfo)
	ln, err := listen(c)
	if err != nil {
		return err
	}
	defer ln.Close()
	cl, err := broker.Start(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	b, err := obsdemo.NewBuilder(cl)
	if err != nil {
		return err
	}
	defer b.Close()
	pipe, err := b.NewPipeline(ctx)
	if err != nil {
		return err
	}
	for range 20 {
		if _, err := pipe.Step(ctx); err != nil {
			return err
		}
	}
	if _, err := b.Faulty(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "parsley-observe-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := observer.OpenStore(ctx, filepath.Join(dir, "observer.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: cl.Addrs(), Pattern: regexp.MustCompile(".*"), Logger: log}, st)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := o.Scan(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "parsley-observe demo: embedded broker at %s; topics orders, shipments (clean, one order and shipment a second) and gap, regress, claims, mixed, bad, up, down, grow (one finding each)\n", strings.Join(cl.Addrs(), ","))
	// The clean pipeline keeps running, so the UI shows a live topology.
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := pipe.Step(ctx); err != nil && ctx.Err() == nil {
					log.Error("demo pipeline step", "err", err)
				}
			}
		}
	})
	defer wg.Wait()
	defer stop()
	return runServer(ctx, ln, o, serveOptions{Payloads: true, Logger: log}, c.App.Writer)
}

// ack acknowledges a finding through a serving observer's API, so the
// server checks the credentials and logs the identity as for the UI.
func ack(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("want one argument: the finding's id (the id of /api/findings, or # in scan's output)", 2)
	}
	// --reason is checked here rather than marked Required: urfave/cli
	// checks required flags before the config file is applied.
	if strings.TrimSpace(c.String("reason")) == "" {
		return cli.Exit("--reason: say why the finding is acknowledged (kept in its history)", 2)
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(c.Args().First(), "#"), 10, 64)
	if err != nil || id < 1 {
		return cli.Exit(fmt.Sprintf("finding %q: want a positive finding id", c.Args().First()), 2)
	}
	base, err := url.Parse(c.String("url"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return cli.Exit(fmt.Sprintf("--url %q: want http://HOST:PORT or https://HOST:PORT", c.String("url")), 2)
	}
	readSecret := func(flag string) (string, error) {
		b, err := os.ReadFile(c.String(flag))
		if err != nil {
			return "", cli.Exit(fmt.Sprintf("--%s: %v", flag, err), 2)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", cli.Exit(fmt.Sprintf("--%s %s is empty", flag, c.String(flag)), 2)
		}
		return v, nil
	}
	body, _ := json.Marshal(web.AckRequest{Reason: c.String("reason")})
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base.JoinPath("api", "findings", strconv.FormatInt(id, 10), "ack").String(), bytes.NewReader(body))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	req.Header.Set("Content-Type", "application/json")
	switch {
	case c.String("token-file") != "" && c.String("user") != "":
		return cli.Exit("give either --token-file or --user, not both", 2)
	case c.String("token-file") != "":
		tok, err := readSecret("token-file")
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	case c.String("user") != "":
		if c.String("password-file") == "" {
			return cli.Exit("--user needs --password-file", 2)
		}
		pw, err := readSecret("password-file")
		if err != nil {
			return err
		}
		req.SetBasicAuth(c.String("user"), pw)
	default:
		return cli.Exit("acknowledging needs credentials: --token-file, or --user with --password-file", 2)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cli.Exit(fmt.Sprintf("acknowledge finding %d at %s: %v", id, base.Redacted(), err), 2)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return cli.Exit(fmt.Sprintf("acknowledge finding %d: %s: %s", id, resp.Status, strings.TrimSpace(string(msg))), 2)
	}
	var f observer.Finding
	if err := json.Unmarshal(msg, &f); err != nil || f.Ack == nil {
		return cli.Exit(fmt.Sprintf("acknowledge finding %d: unexpected answer from %s: %.200s", id, base.Redacted(), msg), 2)
	}
	fmt.Fprintf(c.App.Writer, "finding %d (%s) acknowledged by %s at %s: %s\n", f.ID, f.Code, f.Ack.By, f.Ack.At.Format(time.RFC3339), f.Ack.Reason)
	return nil
}

// groupFlags make serve one shard of a group of observers sharing the
// topics (observer.Config.Group).
func groupFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "group", Category: "Sharing the topics", Usage: "share the topics with the other observers of this group: each reads and judges some partitions, and every one lists the group's findings"},
		&cli.StringFlag{Name: "instance", Category: "Sharing the topics", Usage: "this shard's name in the group, stable across restarts (default: the host name)"},
		&cli.StringFlag{Name: "advertise-url", Category: "Sharing the topics", Usage: "where this shard's web UI answers for the others to send readers to (default: http://HOST:PORT/ of --listen, with the host name for an unspecified address)"},
		&cli.StringFlag{Name: "state-topic", Category: "Sharing the topics", Usage: "the compacted topic the group's shards share their state through (default: __parsley-observe-GROUP)"},
		&cli.DurationFlag{Name: "session-timeout", Category: "Sharing the topics", Value: 45 * time.Second, Usage: "how long the group waits for a shard that stopped before its partitions move to the others"},
	}
}

// groupConfig reads the group flags into cfg.
func groupConfig(c *cli.Context, cfg *observer.Config) error {
	group := c.String("group")
	if group == "" {
		for _, f := range []string{"instance", "advertise-url", "state-topic"} {
			if c.IsSet(f) {
				return cli.Exit(fmt.Sprintf("--%s: only with --group", f), 2)
			}
		}
		return nil
	}
	host, _ := os.Hostname()
	cfg.Group, cfg.Instance, cfg.StateTopic = group, cmp.Or(c.String("instance"), host), c.String("state-topic")
	if cfg.Instance == "" {
		return cli.Exit("--instance: want a name for this shard (the host name is unknown)", 2)
	}
	if cfg.SessionTimeout = c.Duration("session-timeout"); cfg.SessionTimeout <= 0 {
		return cli.Exit(fmt.Sprintf("--session-timeout %v: want a positive duration", cfg.SessionTimeout), 2)
	}
	cfg.AdvertiseURL = c.String("advertise-url")
	if u, err := url.Parse(cfg.AdvertiseURL); cfg.AdvertiseURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return cli.Exit(fmt.Sprintf("--advertise-url %q: want http://HOST:PORT/ or https://HOST:PORT/", cfg.AdvertiseURL), 2)
	}
	return nil
}

// advertise is where a shard without --advertise-url tells the others its
// UI answers: the address it listens on, with the host name for an
// unspecified one.
func advertise(ln *listener) string {
	u, _ := url.Parse(ln.URL())
	h, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return ln.URL()
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			u.Host = net.JoinHostPort(name, port)
		}
	}
	return u.String()
}

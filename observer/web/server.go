// Package web serves the observer's store to people and programs: an HTML
// UI (findings, topics, a record's causal graph), a JSON API, /metrics and
// health endpoints. It only reads; it reaches the store through the
// observer package's exported query methods.
package web

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/observer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// assetFS holds the UI's static files. assets/dagre.min.js is
// @dagrejs/dagre 3.1.3 (graph layout; MIT licence, Copyright (c) 2012-2014
// Chris Pettitt, full text in assets/dagre.LICENSE), the unmodified dist
// file of `npm pack @dagrejs/dagre`. assets/graph.js turns its layout into
// SVG.
//
//go:embed assets
var assetFS embed.FS

//go:embed templates/*.html
var templateFS embed.FS

// Config configures a Server.
type Config struct {
	// Store is the observer store served. Required.
	Store *observer.Store
	// Findings evaluates every finding; an Observer's Findings method,
	// which judges them against live broker offsets and publishes their
	// counts as metrics. Nil evaluates the store alone, without broker
	// offsets.
	Findings func(context.Context) ([]observer.Finding, error)
	// Gatherer is served at /metrics; nil serves none.
	Gatherer prometheus.Gatherer
	// Health reports whether the observer feeding the store can read the
	// cluster; /readyz and the UI's banner show it. Nil: a store read on
	// its own, always ready.
	Health func() observer.Health
	// Payload reads a size-capped preview of a record's key, value and
	// headers for the record page (an Observer's Payload method). Nil
	// turns previews off, for payloads that must not be shown.
	Payload func(context.Context, headers.Coordinate) (*observer.Payload, error)
	// Access says who may acknowledge findings (see LoadAccess). Nil
	// refuses every acknowledgement: reading needs no credentials, writing
	// must be configured.
	Access *Access
	// Logger receives acknowledgements and refused writes, with the
	// identity; nil means slog.Default().
	Logger *slog.Logger

	// For an observer that is one shard of a group (observer.Config.Group):
	// Acknowledge acknowledges a finding (an Observer's Acknowledge method,
	// which tells the group; nil: Store.Acknowledge). Locate says where a
	// channel's records are served (an Observer's Locate method): a record
	// page or graph of a channel another shard reads redirects there (nil:
	// here). Shards lists the group's members for /api/shards and the
	// topics page (an Observer's Shards method; nil: none).
	Acknowledge func(ctx context.Context, id int64, by, reason string) (observer.Finding, error)
	Locate      func(context.Context, headers.Channel) (url string, here bool)
	Shards      func(context.Context) ([]observer.Shard, error)
}

// Server serves the web UI, the JSON API, /metrics and /livez over a
// store. Its one write is acknowledging a finding, which only the
// identities Config.Access names may do.
type Server struct {
	store    *observer.Store
	evaluate func(context.Context) ([]observer.Finding, error)
	health   func() observer.Health
	preview  func(context.Context, headers.Coordinate) (*observer.Payload, error)
	access   *Access
	log      *slog.Logger
	ack      func(ctx context.Context, id int64, by, reason string) (observer.Finding, error)
	locate   func(context.Context, headers.Channel) (string, bool)
	shards   func(context.Context) ([]observer.Shard, error)
	mux      *http.ServeMux
	pages    map[string]*template.Template

	// Findings scan the whole claim index; evaluations are shared by
	// requests within findingsTTL of each other.
	mu       sync.Mutex
	cached   []observer.Finding
	cachedAt time.Time
}

const findingsTTL = 2 * time.Second

// New returns a server configured by cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("web: no store")
	}
	s := &Server{store: cfg.Store, evaluate: cfg.Findings, health: cfg.Health, preview: cfg.Payload, access: cfg.Access, log: cfg.Logger,
		ack: cfg.Acknowledge, locate: cfg.Locate, shards: cfg.Shards,
		mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.ack == nil {
		s.ack = cfg.Store.Acknowledge
	}
	if s.evaluate == nil {
		s.evaluate = func(ctx context.Context) ([]observer.Finding, error) { return cfg.Store.Findings(ctx, nil) }
	}
	funcs := template.FuncMap{
		"hasPrefix": strings.HasPrefix,
		"show":      show,
		"lagOf":     lagOf,
		"lastRead":  lastRead,
		"pct":       func(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" },
		"when":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	}
	for _, p := range []string{"findings", "topics", "record", "error", "finding"} {
		t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("web: parse template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	assets, _ := fs.Sub(assetFS, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	if cfg.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	// /livez as the stages name it; /healthz is kept for probes set up
	// before the name changed.
	s.mux.HandleFunc("GET /livez", s.livez)
	s.mux.HandleFunc("GET /healthz", s.livez)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /api/health", s.apiHealth)
	s.mux.HandleFunc("GET /api/findings", s.apiFindings)
	s.mux.HandleFunc("GET /api/findings/{id}", s.apiFinding)
	s.mux.HandleFunc("POST /api/findings/{id}/ack", s.apiAck)
	s.mux.HandleFunc("GET /finding/{id}", s.uiFinding)
	s.mux.HandleFunc("GET /api/topics", s.apiTopics)
	s.mux.HandleFunc("GET /api/records/{coord...}", s.apiRecord)
	s.mux.HandleFunc("GET /api/graph/{coord...}", s.apiGraph)
	s.mux.HandleFunc("GET /api/shards", s.apiShards)
	s.mux.HandleFunc("GET /{$}", s.uiFindings)
	s.mux.HandleFunc("GET /topics", s.uiTopics)
	s.mux.HandleFunc("GET /record/{coord...}", s.uiRecord)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// badRequest is an error that is the client's fault: it becomes a 400.
type badRequest struct{ err error }

func (b badRequest) Error() string { return b.err.Error() }
func (b badRequest) Unwrap() error { return b.err }

// status is the HTTP status an error becomes.
func status(err error) int {
	var br badRequest
	switch {
	case errors.As(err, &br), errors.Is(err, observer.ErrBadCoordinate), errors.Is(err, observer.ErrBadSeverity),
		errors.Is(err, observer.ErrBadState), errors.Is(err, observer.ErrBadAck):
		return http.StatusBadRequest
	case errors.Is(err, observer.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, observer.ErrClusterUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// fail answers an API request with the error as text, topics and senders
// by name.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	http.Error(w, s.byName(r.Context(), err.Error()), status(err))
}

// failPage answers a UI request with an error page that keeps the
// navigation.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	code := status(err)
	s.renderStatus(w, code, "error", map[string]any{"Title": http.StatusText(code), "Status": code, "Error": s.byName(r.Context(), err.Error())})
}

// byName rewrites the topic and sender IDs in text as their names.
func (s *Server) byName(ctx context.Context, text string) string {
	names, err := s.store.Names(ctx)
	if err != nil {
		return text
	}
	return names.Text(text)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// livez answers 200 while the store answers: a lost cluster is not a
// reason to restart the observer (/readyz says it), a dead store is.
func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	if err := s.store.Ping(r.Context()); err != nil {
		http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

// readyz answers 200 while the observer reads the cluster, 503 with the
// reason when it cannot.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.store.Ping(r.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if s.health != nil {
		if h := s.health(); !h.Up {
			http.Error(w, "not ready: cannot read the cluster: "+h.Err, http.StatusServiceUnavailable)
			return
		}
	}
	w.Write([]byte("ready\n"))
}

func (s *Server) apiHealth(w http.ResponseWriter, r *http.Request) {
	h := observer.Health{Up: true}
	if s.health != nil {
		h = s.health()
	}
	writeJSON(w, h)
}

type findingFilter struct {
	Code     string
	Severity string
	Topic    string
	Search   string // a coordinate, topic or word: matched in coordinates, names and summary
	// State is the state asked for: "" (open, the default), open,
	// acknowledged, resolved or all.
	State string
}

// state returns the lifecycle state f selects, "" for every state.
func (f findingFilter) state() observer.State {
	if f.State == "" {
		return observer.StateOpen
	}
	st, _ := observer.ParseState(f.State)
	return st
}

// keySearchLimit bounds how many records with the searched key are
// looked for in findings.
const keySearchLimit = 1000

// filter returns the findings that pass f. A search matches a finding
// whose coordinates (by ID or name) or summary contain it, or that names
// a record whose key is the search text.
func (s *Server) filter(ctx context.Context, all []observer.Finding, f findingFilter) []observer.Finding {
	min, _ := observer.ParseSeverity(f.Severity)
	var keyed map[string]bool
	if f.Search != "" {
		// A store written before keys were kept has none to find; the
		// text search still answers.
		coords, _ := s.store.KeyRecords(ctx, f.Search, keySearchLimit)
		keyed = make(map[string]bool, len(coords))
		for _, c := range coords {
			keyed[c] = true
		}
	}
	q := strings.ToLower(f.Search)
	state := f.state()
	out := []observer.Finding{}
	for _, x := range all {
		if (f.Code != "" && string(x.Code) != f.Code) || x.Severity < min || (f.Topic != "" && x.Topic != f.Topic) || (state != "" && x.State != state) {
			continue
		}
		if q == "" || strings.Contains(strings.ToLower(x.Summary), q) || slices.ContainsFunc(x.Coordinates, func(c string) bool {
			return keyed[c] || strings.Contains(strings.ToLower(c), q)
		}) || slices.ContainsFunc(x.Names, func(c string) bool { return strings.Contains(strings.ToLower(c), q) }) {
			out = append(out, x)
		}
	}
	return out
}

func parseFindingFilter(r *http.Request) (findingFilter, error) {
	q := r.URL.Query()
	f := findingFilter{Code: q.Get("code"), Severity: q.Get("severity"), Topic: q.Get("topic"), Search: strings.TrimSpace(q.Get("q")), State: q.Get("state")}
	if _, err := observer.ParseState(f.State); err != nil {
		return f, err
	}
	if f.Code != "" && !observer.Code(f.Code).Known() {
		return f, badRequest{fmt.Errorf("unknown finding code %q", f.Code)}
	}
	if f.Severity != "" {
		if _, err := observer.ParseSeverity(f.Severity); err != nil {
			return f, err
		}
	}
	return f, nil
}

// findings evaluates every finding, publishes the counts as metrics and
// applies the filter.
func (s *Server) findings(ctx context.Context, f findingFilter) ([]observer.Finding, error) {
	all, err := s.evaluateShared(ctx)
	if err != nil {
		return nil, err
	}
	return s.filter(ctx, all, f), nil
}

// evaluateShared returns the findings evaluated within findingsTTL, or
// evaluates them anew.
func (s *Server) evaluateShared(ctx context.Context) ([]observer.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && time.Since(s.cachedAt) < findingsTTL {
		return s.cached, nil
	}
	all, err := s.evaluate(ctx)
	if errors.Is(err, observer.ErrClusterUnavailable) {
		// Judge what the store alone can; the banner and /readyz say the
		// cluster is out of sight. Not cached: the next request tries the
		// cluster again.
		return s.store.Findings(ctx, nil)
	}
	if err != nil {
		return nil, err
	}
	if all == nil {
		all = []observer.Finding{}
	}
	s.cached, s.cachedAt = all, time.Now()
	return all, nil
}

func (s *Server) apiFindings(w http.ResponseWriter, r *http.Request) {
	f, err := parseFindingFilter(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fs, err := s.findings(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, fs)
}

func (s *Server) apiTopics(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.Topics(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if ts == nil {
		ts = []observer.TopicStats{}
	}
	writeJSON(w, ts)
}

// graphParams reads the coordinate and the depth and limit parameters.
func (s *Server) graphParams(r *http.Request) (headers.Coordinate, observer.Limits, error) {
	ref, err := observer.ParseRef(r.PathValue("coord"))
	if err != nil {
		return headers.Coordinate{}, observer.Limits{}, err
	}
	var lim observer.Limits
	for _, p := range []struct {
		name string
		dst  *int
		def  int
	}{{"depth", &lim.Depth, 6}, {"limit", &lim.Nodes, 200}} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			*p.dst = p.def
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return headers.Coordinate{}, observer.Limits{}, badRequest{fmt.Errorf("parameter %s=%q: want an integer from 1 to 10000", p.name, v)}
		}
		*p.dst = n
	}
	c, err := s.store.Resolve(r.Context(), ref)
	return c, lim, err
}

// elsewhere redirects a request about channel ch to the shard of the group
// that reads it, and reports whether it did. A request already sent on
// by a shard (hop) is answered here, so shards that disagree for a moment
// while a channel moves cannot send a reader round in circles.
func (s *Server) elsewhere(w http.ResponseWriter, r *http.Request, ch headers.Channel) bool {
	if s.locate == nil || r.URL.Query().Get("hop") != "" {
		return false
	}
	base, here := s.locate(r.Context(), ch)
	if here || base == "" {
		return false
	}
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	u = u.JoinPath(r.URL.EscapedPath())
	q := r.URL.Query()
	q.Set("hop", "1")
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
	return true
}

// apiShards answers GET /api/shards: the members of the observer's group,
// or [] for an observer without one.
func (s *Server) apiShards(w http.ResponseWriter, r *http.Request) {
	out := []observer.Shard{}
	if s.shards != nil {
		sh, err := s.shards(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out = append(out, sh...)
	}
	writeJSON(w, out)
}

func (s *Server) apiRecord(w http.ResponseWriter, r *http.Request) {
	c, lim, err := s.graphParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.elsewhere(w, r, c.Channel) {
		return
	}
	rec, err := s.store.Record(r.Context(), c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	up, err := s.store.Ancestry(r.Context(), c, lim)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	down, err := s.store.Descendants(r.Context(), c, lim)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m := recordJSON(rec)
	m["label"] = up.RootLabel // by name; "coordinate" stays by topic ID
	writeJSON(w, map[string]any{"record": m, "ancestry": up, "descendants": down})
}

func recordJSON(r *observer.Record) map[string]any {
	m := map[string]any{
		"coordinate": r.Coordinate.String(), "topic": r.Topic, "timestamp": r.Timestamp, "control": r.Control,
		"stamped": r.Stamped, "offset_entries": r.Offsets, "seq_entries": r.Seqs, "header_bytes": r.HeaderSize,
	}
	if r.Tagged {
		m["sender"], m["seq"] = r.Sender.String(), r.Seq
	}
	if r.Err != "" {
		m["error"] = r.Err
	}
	return m
}

func (s *Server) apiGraph(w http.ResponseWriter, r *http.Request) {
	c, lim, err := s.graphParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.elsewhere(w, r, c.Channel) {
		return
	}
	var g *observer.Graph
	switch dir := r.URL.Query().Get("direction"); dir {
	case "", "both":
		g, err = s.store.Both(r.Context(), c, lim)
	case "ancestry":
		g, err = s.store.Ancestry(r.Context(), c, lim)
	case "descendants":
		g, err = s.store.Descendants(r.Context(), c, lim)
	default:
		err = badRequest{fmt.Errorf("parameter direction=%q: want ancestry, descendants or both", dir)}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		writeJSON(w, g)
	case "dot":
		w.Header().Set("Content-Type", "text/vnd.graphviz")
		g.WriteDOT(w)
	default:
		s.fail(w, r, badRequest{fmt.Errorf("parameter format=%q: want json or dot", f)})
	}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) {
	if n, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && n >= 1 {
		data["Refresh"] = n
	}
	s.renderStatus(w, http.StatusOK, page, data)
}

// renderStatus renders page inside the layout, with the health banner.
func (s *Server) renderStatus(w http.ResponseWriter, code int, page string, data map[string]any) {
	if s.health != nil {
		data["Health"] = s.health()
	}
	var b strings.Builder
	if err := s.pages[page].ExecuteTemplate(&b, page+".html", data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(b.String()))
}

func (s *Server) uiFindings(w http.ResponseWriter, r *http.Request) {
	f, err := parseFindingFilter(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	all, err := s.findings(r.Context(), findingFilter{})
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	fs := s.filter(r.Context(), all, f)
	names, err := s.store.Names(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	rows := make([]findingRow, len(fs))
	for i, x := range fs {
		rows[i] = findingRow{Finding: x, Involved: involved(x, names)}
	}
	s.render(w, r, "findings", map[string]any{
		"Title": "Findings", "Findings": rows, "Total": len(all), "Codes": observer.AllCodes(), "TopicNames": names,
		"Summary":    s.codeSummary(r.Context(), all),
		"Severities": []observer.Severity{observer.SeverityInfo, observer.SeverityWarning, observer.SeverityError},
		"States":     []string{"open", "acknowledged", "resolved", "all"},
		"Code":       f.Code, "Severity": f.Severity, "Topic": f.Topic, "Search": f.Search, "DocsURL": docsURL,
		"State": string(cmp.Or(f.state(), "all")),
	})
}

// findingRow is a finding as the findings page lists it.
type findingRow struct {
	observer.Finding
	Involved []Involved
}

func (s *Server) uiTopics(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.Topics(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	data := map[string]any{"Title": "Topics", "Topics": ts}
	if s.shards != nil {
		if data["Shards"], err = s.shards(r.Context()); err != nil {
			s.failPage(w, r, err)
			return
		}
	}
	s.render(w, r, "topics", data)
}

func (s *Server) uiRecord(w http.ResponseWriter, r *http.Request) {
	c, lim, err := s.graphParams(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	if s.elsewhere(w, r, c.Channel) {
		return
	}
	rec, err := s.store.Record(r.Context(), c)
	if errors.Is(err, observer.ErrNotFound) {
		s.missingRecord(w, r, c, err)
		return
	}
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	g, err := s.store.Both(r.Context(), c, lim)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	names, err := s.store.Names(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	var clk strings.Builder
	if rec.Err == "" && rec.Stamped {
		if st, err := rec.Stamp(); err == nil {
			names.WriteClock(&clk, &st.Clock)
		}
	} else if !rec.Stamped {
		clk.WriteString("no stamp: claims nothing")
	}
	label := names.Coordinate(c)
	data := map[string]any{
		"Title": "Record " + label, "Label": label, "Record": rec, "Graph": g, "Clock": clk.String(),
		"Time": time.UnixMilli(rec.Timestamp).UTC().Format(time.RFC3339Nano), "Depth": lim.Depth, "Limit": lim.Nodes,
		"SenderName": names.SenderName(rec.Sender), "Names": names,
	}
	if data["Findings"], err = s.findingsOf(r.Context(), c); err != nil {
		s.failPage(w, r, err)
		return
	}
	data["Payload"], data["PayloadNote"] = s.payload(r.Context(), c)
	s.render(w, r, "record", data)
}

// payloadWait bounds how long a record page waits for a payload preview
// from the brokers.
const payloadWait = 3 * time.Second

// payload returns the record's payload preview, or why there is none.
func (s *Server) payload(ctx context.Context, c headers.Coordinate) (*observer.Payload, string) {
	if s.preview == nil {
		return nil, "Payload previews are off (serve --no-payloads)."
	}
	if s.health != nil && !s.health().Up {
		return nil, "The cluster cannot be read now; no payload preview."
	}
	ctx, cancel := context.WithTimeout(ctx, payloadWait)
	defer cancel()
	p, err := s.preview(ctx, c)
	if err != nil {
		return nil, "No payload preview: " + err.Error()
	}
	return p, ""
}

// shown is a payload preview as the record page prints it.
type shown struct {
	Text      string
	Hex, Cut  bool
	Size      int
	Truncated int // bytes not shown
}

func show(p observer.Preview) shown {
	text, isHex, cut := p.Text()
	return shown{Text: text, Hex: isHex, Cut: cut, Size: p.Size, Truncated: p.Size - len(p.Head)}
}

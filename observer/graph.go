package observer

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// Node states.
const (
	StateRecord     = "record"     // a stored record
	StateMarker     = "marker"     // a transaction marker: a claim on it never settles by delivery
	StateAborted    = "aborted"    // a record of an aborted transaction (read uncommitted only)
	StateMissing    = "missing"    // claimed, but not in the store (not observed, pruned, aborted or not yet written)
	StateUnresolved = "unresolved" // a sequence claim whose sender's record has not been seen
)

// Node is a vertex of a causal graph: a record, or a claimed position with
// no record behind it.
type Node struct {
	ID    string `json:"id"` // the coordinate, or "seq:CHANNEL:SENDER:SEQ" for an unresolved sequence claim
	Topic string `json:"topic,omitempty"`
	// Label is ID with the topic by name (see Names): what a person reads.
	Label   string `json:"label"`
	State   string `json:"state"`
	Depth   int    `json:"depth"`
	Stamped bool   `json:"stamped,omitempty"`
	Sender  string `json:"sender,omitempty"`
	// SenderName is the sender's stage task, "app/stage/partition", when
	// the observer could name it (see senders.go).
	SenderName string `json:"sender_name,omitempty"`
	Seq        int64  `json:"seq,omitempty"`
	// Link is the node's coordinate as a record page's path, by topic
	// name where that is unambiguous: for a record, a marker, or a missing
	// position (whose page lists the claims on it; in a group of
	// observers, the shard reading its partition answers).
	Link    string `json:"link,omitempty"`
	Entries int    `json:"entries,omitempty"`
	Err     string `json:"error,omitempty"`
}

// Edge says Effect's stamp claims Cause.
type Edge struct {
	Cause  string `json:"cause"`
	Effect string `json:"effect"`
	Kind   string `json:"kind"` // "offset" or "seq"
}

// Graph is a record's ancestry or descendants.
type Graph struct {
	Root      string `json:"root"`
	RootLabel string `json:"root_label"` // Root by name
	Direction string `json:"direction"`  // "ancestry", "descendants" or "both"
	Nodes     []Node `json:"nodes"`
	Edges     []Edge `json:"edges"`
	// Truncated is set when the depth or size limit cut the walk short.
	Truncated bool `json:"truncated"`
}

// MarshalJSON writes the graph with empty lists as [], never null, so a
// record with no causes or effects reads the same as any other.
func (g Graph) MarshalJSON() ([]byte, error) {
	type plain Graph
	p := plain(g)
	if p.Nodes == nil {
		p.Nodes = []Node{}
	}
	if p.Edges == nil {
		p.Edges = []Edge{}
	}
	return json.Marshal(p)
}

// Limits bound a graph walk.
type Limits struct {
	Depth int // maximum distance from the root; ≤ 0 means 1,000
	Nodes int // maximum nodes; ≤ 0 means 5,000
}

func (l Limits) norm() Limits {
	if l.Depth <= 0 {
		l.Depth = 1000
	}
	if l.Nodes <= 0 {
		l.Nodes = 5000
	}
	return l
}

// Ancestry walks root's claims transitively: offset claims point at the
// claimed record, sequence claims at the sender's record with that
// sequence once seen. The root must be a stored record.
func (s *Store) Ancestry(ctx context.Context, root headers.Coordinate, lim Limits) (*Graph, error) {
	g, err := s.walk(ctx, root, lim, true)
	if err != nil {
		return nil, err
	}
	return g, s.label(ctx, g)
}

// Descendants walks the records whose stamps claim root, transitively.
func (s *Store) Descendants(ctx context.Context, root headers.Coordinate, lim Limits) (*Graph, error) {
	g, err := s.walk(ctx, root, lim, false)
	if err != nil {
		return nil, err
	}
	return g, s.label(ctx, g)
}

// label sets the graph's labels by name. It runs after the walk has given
// back its connection: a walk must never wait for a second one.
func (s *Store) label(ctx context.Context, g *Graph) error {
	names, err := s.Names(ctx)
	if err != nil {
		return err
	}
	g.RootLabel = names.Text(g.Root)
	for i := range g.Nodes {
		n := &g.Nodes[i]
		n.Label = names.Text(n.ID)
		if n.State == StateRecord || n.State == StateMarker || n.State == StateMissing {
			n.Link = names.Link(n.ID)
		}
		if id, err := headers.ParseSenderID(n.Sender); err == nil {
			n.SenderName = names.SenderName(id)
		}
	}
	return nil
}

// labels maps node IDs to their labels.
func (g *Graph) labels() map[string]string {
	m := make(map[string]string, len(g.Nodes))
	for _, n := range g.Nodes {
		m[n.ID] = cmp.Or(n.Label, n.ID)
	}
	return m
}

// Both merges a record's ancestry and descendants into one graph, each
// walked within lim.
func (s *Store) Both(ctx context.Context, root headers.Coordinate, lim Limits) (*Graph, error) {
	up, err := s.Ancestry(ctx, root, lim)
	if err != nil {
		return nil, err
	}
	down, err := s.Descendants(ctx, root, lim)
	if err != nil {
		return nil, err
	}
	g := &Graph{Root: up.Root, RootLabel: up.RootLabel, Direction: "both", Nodes: up.Nodes, Edges: up.Edges, Truncated: up.Truncated || down.Truncated}
	have := map[string]bool{}
	for _, n := range up.Nodes {
		have[n.ID] = true
	}
	for _, n := range down.Nodes {
		if !have[n.ID] {
			g.Nodes = append(g.Nodes, n)
		}
	}
	g.Edges = append(g.Edges, down.Edges...)
	return g, nil
}

func (s *Store) walk(ctx context.Context, root headers.Coordinate, lim Limits, up bool) (*Graph, error) {
	lim = lim.norm()
	rec, err := s.Record(ctx, root)
	if err != nil {
		return nil, err
	}
	g := &Graph{Root: root.String(), Direction: "descendants"}
	if up {
		g.Direction = "ancestry"
	}
	seen := map[string]bool{}
	names := map[headers.TopicID]string{}
	type item struct {
		rec   *Record
		depth int
	}
	queue := []item{{rec, 0}}
	seen[g.Root] = true
	g.Nodes = append(g.Nodes, recordNode(rec, 0))
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("observer: walk from %s: %w", root, err)
	}
	conn := &stmtCache{conn: c, stmts: map[string]*sql.Stmt{}}
	defer conn.close()
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if it.depth >= lim.Depth {
			if it.rec != nil {
				g.Truncated = true
			}
			continue
		}
		var next []*Record
		var edges []Edge
		if up {
			next, edges, err = s.causes(ctx, conn, it.rec, g, seen, names, it.depth+1)
		} else {
			next, edges, err = s.effects(ctx, conn, it.rec, lim.Nodes)
		}
		if err != nil {
			return nil, err
		}
		g.Edges = append(g.Edges, edges...)
		for _, r := range next {
			id := r.Coordinate.String()
			if seen[id] {
				continue
			}
			if len(g.Nodes) >= lim.Nodes {
				g.Truncated = true
				break
			}
			seen[id] = true
			g.Nodes = append(g.Nodes, recordNode(r, it.depth+1))
			queue = append(queue, item{r, it.depth + 1})
		}
	}
	// Drop edges to nodes the limits cut off, so the graph is closed.
	kept := g.Edges[:0]
	for _, e := range g.Edges {
		if seen[e.Cause] && seen[e.Effect] {
			kept = append(kept, e)
		}
	}
	g.Edges = kept
	return g, nil
}

func recordNode(r *Record, depth int) Node {
	n := Node{ID: r.Coordinate.String(), Topic: r.Topic, State: StateRecord, Depth: depth, Stamped: r.Stamped, Entries: r.Offsets + r.Seqs, Err: r.Err}
	switch {
	case r.Control:
		n.State = StateMarker
	case r.Aborted:
		n.State = StateAborted
	}
	if r.Tagged {
		n.Sender, n.Seq = r.Sender.String(), r.Seq
	}
	return n
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// stmtCache prepares each query of a walk once on one connection: a walk
// asks the same few questions a thousand times.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func (c *stmtCache) stmt(ctx context.Context, q string) *sql.Stmt {
	st, ok := c.stmts[q]
	if !ok {
		var err error
		if st, err = c.conn.PrepareContext(ctx, q); err != nil {
			return nil
		}
		c.stmts[q] = st
	}
	return st
}

func (c *stmtCache) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.conn.QueryRowContext(ctx, q, args...) // reports the prepare error
}

func (c *stmtCache) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.conn.QueryContext(ctx, q, args...)
}

func (c *stmtCache) close() {
	for _, st := range c.stmts {
		st.Close()
	}
	c.conn.Close()
}

// causes returns the records r claims, adding nodes for claimed positions
// with no record behind them directly to g.
func (s *Store) causes(ctx context.Context, q querier, r *Record, g *Graph, seen map[string]bool, names map[headers.TopicID]string, depth int) ([]*Record, []Edge, error) {
	if r.Control || !r.Stamped || r.Err != "" {
		return nil, nil, nil
	}
	st, err := r.Stamp()
	if err != nil {
		return nil, nil, nil // stored as undecodable; nothing to follow
	}
	self := r.Coordinate.String()
	var out []*Record
	var edges []Edge
	name := func(id headers.TopicID) string {
		n, ok := names[id]
		if !ok {
			// Through q: a walk holds one connection and must not wait for a
			// second, or concurrent walks could starve each other.
			q.QueryRowContext(ctx, `SELECT name FROM channels WHERE topic = ? AND name != '' LIMIT 1`, id[:]).Scan(&n)
			names[id] = n
		}
		return n
	}
	for e := range st.Clock.OffsetEntries() {
		at := headers.Coordinate{Channel: e.Channel, Offset: e.Offset}
		id := at.String()
		edges = append(edges, Edge{Cause: id, Effect: self, Kind: "offset"})
		if seen[id] {
			continue
		}
		cr, err := scanRecord(q.QueryRowContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE c.topic = ? AND c.part = ? AND r.off = ?`,
			at.Topic[:], at.Partition, at.Offset))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			seen[id] = true
			g.Nodes = append(g.Nodes, Node{ID: id, Topic: name(at.Topic), State: StateMissing, Depth: depth})
		case err != nil:
			return nil, nil, fmt.Errorf("observer: cause %s of %s: %w", at, r.Coordinate, err)
		default:
			out = append(out, cr)
		}
	}
	for e := range st.Clock.SeqEntries() {
		cr, err := s.bySequence(ctx, q, e)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			id := fmt.Sprintf("seq:%s:%s:%d", e.Channel, e.Sender, e.Seq)
			edges = append(edges, Edge{Cause: id, Effect: self, Kind: "seq"})
			if !seen[id] {
				seen[id] = true
				g.Nodes = append(g.Nodes, Node{ID: id, Topic: name(e.Channel.Topic), State: StateUnresolved, Depth: depth, Sender: e.Sender.String(), Seq: e.Seq})
			}
		case err != nil:
			return nil, nil, fmt.Errorf("observer: sequence cause of %s: %w", r.Coordinate, err)
		default:
			edges = append(edges, Edge{Cause: cr.Coordinate.String(), Effect: self, Kind: "seq"})
			out = append(out, cr)
		}
	}
	return out, edges, nil
}

// bySequence returns the record a sequence claim names: the sender's first
// record on the channel with that sequence number, or sql.ErrNoRows.
func (s *Store) bySequence(ctx context.Context, q querier, e headers.SeqEntry) (*Record, error) {
	var ch, sender sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT (SELECT id FROM channels WHERE topic = ? AND part = ?), (SELECT id FROM senders WHERE sender = ?)`,
		e.Channel.Topic[:], e.Channel.Partition, e.Sender[:]).Scan(&ch, &sender)
	if err != nil {
		return nil, err
	}
	if !ch.Valid || !sender.Valid {
		return nil, sql.ErrNoRows // a channel or sender never seen
	}
	ps, err := sequenced(ctx, q, ch.Int64, sender.Int64, e.Seq)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, sql.ErrNoRows
	}
	return scanRecord(q.QueryRowContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE r.id = ?`, ps[0].rec))
}

// effects returns the records whose stamps claim r exactly: an offset
// claim on its coordinate, or a sequence claim on its sender and sequence.
// The claim index holds the first record of each run of records on a
// channel that carry the same claim; the rest of each run is read forward
// from it, up to budget records.
func (s *Store) effects(ctx context.Context, q querier, r *Record, budget int) ([]*Record, []Edge, error) {
	self := r.Coordinate.String()
	var out []*Record
	var edges []Edge
	collect := func(rows *sql.Rows, kind string, claims func(*headers.Clock) bool) error {
		var firsts []*Record
		for rows.Next() {
			er, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
			}
			firsts = append(firsts, er)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
		}
		for _, first := range firsts {
			run, err := s.run(ctx, q, first, claims, budget-len(out))
			if err != nil {
				return err
			}
			for _, er := range run {
				out = append(out, er)
				edges = append(edges, Edge{Cause: self, Effect: er.Coordinate.String(), Kind: kind})
			}
		}
		return nil
	}
	var ch int64
	if err := q.QueryRowContext(ctx, `SELECT id FROM channels WHERE topic = ? AND part = ?`, r.Coordinate.Topic[:], r.Coordinate.Partition).Scan(&ch); err != nil {
		return nil, nil, fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
	}
	recs, err := claimers(ctx, q, ch, r.Coordinate.Offset)
	if err != nil {
		return nil, nil, fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
	}
	rows, err := q.QueryContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE r.id IN (SELECT value FROM json_each(?)) ORDER BY r.id`, jsonInts(recs))
	if err != nil {
		return nil, nil, fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
	}
	if err := collect(rows, "offset", func(c *headers.Clock) bool {
		v, ok := c.Offset(r.Coordinate.Channel)
		return ok && v == r.Coordinate.Offset
	}); err != nil {
		return nil, nil, err
	}
	if r.Tagged {
		rows, err := q.QueryContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE r.id IN (
			SELECT sc.rec FROM seq_claims sc WHERE sc.ch = (SELECT id FROM channels WHERE topic = ? AND part = ?)
			AND sc.sender = (SELECT id FROM senders WHERE sender = ?) AND sc.value = ?) ORDER BY r.id`,
			r.Coordinate.Topic[:], r.Coordinate.Partition, r.Sender[:], r.Seq)
		if err != nil {
			return nil, nil, fmt.Errorf("observer: effects of %s: %w", r.Coordinate, err)
		}
		if err := collect(rows, "seq", func(c *headers.Clock) bool {
			v, ok := c.Seq(r.Coordinate.Channel, r.Sender)
			return ok && v == r.Seq
		}); err != nil {
			return nil, nil, err
		}
	}
	return out, edges, nil
}

// run returns first and the records after it on its channel that carry
// the same claim, skipping markers, up to budget records.
func (s *Store) run(ctx context.Context, q querier, first *Record, claims func(*headers.Clock) bool, budget int) ([]*Record, error) {
	if budget <= 0 {
		return nil, nil
	}
	out := []*Record{first}
	from := first.Coordinate.Offset
	const page = 256
	for len(out) < budget {
		rows, err := q.QueryContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE r.ch = (SELECT ch FROM records WHERE id = ?) AND r.off > ? ORDER BY r.off LIMIT ?`,
			first.id, from, page)
		if err != nil {
			return nil, fmt.Errorf("observer: records after %s: %w", first.Coordinate, err)
		}
		n, stop := 0, false
		for rows.Next() && !stop {
			rec, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("observer: records after %s: %w", first.Coordinate, err)
			}
			n++
			from = rec.Coordinate.Offset
			if rec.Control || rec.Aborted {
				continue
			}
			st, err := rec.Stamp()
			if err != nil || !claims(&st.Clock) || len(out) >= budget {
				stop = true
				break
			}
			out = append(out, rec)
		}
		rows.Close()
		if stop || n < page {
			break
		}
	}
	return out, nil
}

// WriteDOT writes g in Graphviz DOT, causes pointing at their effects.
func (g *Graph) WriteDOT(w io.Writer) error {
	var b strings.Builder
	b.WriteString("digraph parsley {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n")
	labels := g.labels()
	for _, n := range g.Nodes {
		label := labels[n.ID]
		style := ""
		switch n.State {
		case StateMarker, StateAborted, StateMissing, StateUnresolved:
			style = ", style=dashed"
		}
		if n.ID == g.Root {
			style += ", penwidth=2"
		}
		// Nodes are named as people read them; the exact ID is the tooltip.
		fmt.Fprintf(&b, "  %q [label=%q, tooltip=%q%s];\n", label, label+"\\n("+n.State+")", n.ID, style)
	}
	for _, e := range g.Edges {
		attr := ""
		if e.Kind == "seq" {
			attr = " [style=dotted, label=\"seq\"]"
		}
		fmt.Fprintf(&b, "  %q -> %q%s;\n", labels[e.Cause], labels[e.Effect], attr)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, strings.ReplaceAll(b.String(), `\\n`, `\n`))
	return err
}

// WriteJSON writes g as indented JSON.
func (g *Graph) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g)
}

// WriteTree writes g as an indented tree from the root, for terminals: each
// node's causes (ancestry) or effects (descendants) below it; a node
// already printed is marked and not expanded again.
func (g *Graph) WriteTree(w io.Writer) error {
	nodes := map[string]Node{}
	for _, n := range g.Nodes {
		nodes[n.ID] = n
	}
	children := map[string][]Edge{}
	for _, e := range g.Edges {
		if g.Direction == "ancestry" {
			children[e.Effect] = append(children[e.Effect], e)
		} else {
			children[e.Cause] = append(children[e.Cause], e)
		}
	}
	var b strings.Builder
	printed := map[string]bool{}
	var visit func(id, kind, indent string)
	visit = func(id, kind, indent string) {
		n := nodes[id]
		line := cmp.Or(n.Label, id)
		if n.State != StateRecord {
			line += " [" + n.State + "]"
		}
		if n.Sender != "" {
			line += fmt.Sprintf(" sender %s seq %d", cmp.Or(n.SenderName, n.Sender), n.Seq)
		}
		if kind == "seq" {
			line += " via sequence claim"
		}
		if printed[id] {
			fmt.Fprintf(&b, "%s%s (see above)\n", indent, line)
			return
		}
		printed[id] = true
		fmt.Fprintf(&b, "%s%s\n", indent, line)
		for _, e := range children[id] {
			next := e.Cause
			if g.Direction != "ancestry" {
				next = e.Effect
			}
			visit(next, e.Kind, indent+"  ")
		}
	}
	visit(g.Root, "", "")
	if g.Truncated {
		b.WriteString("(truncated at the depth or size limit)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/observer"
)

// errForbidden is a write refused for who or where it comes from: a 403.
var errForbidden = errors.New("forbidden")

// errUnauthorized is a write without valid credentials: a 401.
var errUnauthorized = errors.New("credentials required")

// findingID reads the {id} of a finding path.
func findingID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, badRequest{fmt.Errorf("finding %q: want a finding number (the id of /api/findings)", r.PathValue("id"))}
	}
	return id, nil
}

// Involved is a record or claimed position a finding names, as its pages
// link it.
type Involved struct {
	Coord string // by topic ID, exact
	Label string // by name
	Link  string // the record page's path, "" for a sequence claim
	Role  string // what it is to the finding
}

// involved lists the records f names, with what each is to it.
func involved(f observer.Finding, names observer.Names) []Involved {
	roles := rolesOf(f)
	out := make([]Involved, 0, len(f.Coordinates))
	for i, c := range f.Coordinates {
		in := Involved{Coord: c, Label: names.Text(c)}
		if i < len(roles) {
			in.Role = roles[i]
		} else if len(roles) > 0 {
			in.Role = roles[len(roles)-1]
		}
		if _, err := observer.ParseRef(c); err == nil {
			in.Link = "/record/" + names.Link(c)
		}
		out = append(out, in)
	}
	return out
}

// rolesOf says what each of a finding's coordinates is, in the order the
// rules write them.
func rolesOf(f observer.Finding) []string {
	switch f.Code {
	case observer.CodeSequenceGap:
		return []string{"the sender's record after the gap", "the sender's record before the gap"}
	case observer.CodeStampRegression:
		return []string{"the later stamp, which claims less", "the sender's earlier stamp"}
	case observer.CodeUnsettleableClaim:
		return []string{"the claiming record", "the claimed position, which no committed record occupies"}
	case observer.CodePartiallyStamped:
		return []string{"the first unstamped record", "the first stamped record"}
	case observer.CodeUndecodableStamp:
		return []string{"the record with the undecodable stamp"}
	case observer.CodeCrossPartitionCause:
		return []string{"the record off its key's partition", "the cause it claims on another partition"}
	case observer.CodeStampGrowth:
		return []string{"a record of the last quarter", "a record of the first quarter"}
	case observer.CodeLateJoinerWindow:
		roles := make([]string, len(f.Coordinates))
		for i := range roles {
			roles[i] = "a record carrying the sequence claim"
		}
		if len(f.SafeJoin) > 0 && len(roles) > 0 {
			roles[len(roles)-1] = "the claimed record (the safe join offset)"
		}
		return roles
	}
	return nil
}

// recordFinding is a finding as a record page lists it: with what the
// record is to it and the other records it names.
type recordFinding struct {
	observer.Finding
	Role   string
	Others []Involved
}

// findingsOf returns the findings, in every state, that name c.
func (s *Server) findingsOf(ctx context.Context, c headers.Coordinate) ([]recordFinding, error) {
	all, err := s.evaluateShared(ctx)
	if err != nil {
		return nil, err
	}
	names, err := s.store.Names(ctx)
	if err != nil {
		return nil, err
	}
	at := c.String()
	var out []recordFinding
	for _, f := range all {
		i := slices.Index(f.Coordinates, at)
		if i < 0 {
			continue
		}
		rf := recordFinding{Finding: f}
		for j, in := range involved(f, names) {
			if j == i {
				rf.Role = in.Role
			} else {
				rf.Others = append(rf.Others, in)
			}
		}
		out = append(out, rf)
	}
	return out, nil
}

// missingRecord answers a record page for a position the store holds no
// record at: a 404 that still lists the findings naming the position (a
// claim on it that no committed record settles, say).
func (s *Server) missingRecord(w http.ResponseWriter, r *http.Request, c headers.Coordinate, err error) {
	fs, ferr := s.findingsOf(r.Context(), c)
	if ferr != nil {
		s.failPage(w, r, ferr)
		return
	}
	names, _ := s.store.Names(r.Context())
	label := names.Coordinate(c)
	s.renderStatus(w, http.StatusNotFound, "error", map[string]any{
		"Title": "No record at " + label, "Status": http.StatusNotFound, "Error": s.byName(r.Context(), err.Error()),
		"Findings": fs, "Label": label,
	})
}

// apiFinding answers GET /api/findings/{id}: the finding and its history.
func (s *Server) apiFinding(w http.ResponseWriter, r *http.Request) {
	id, err := findingID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := s.store.Finding(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h, err := s.store.History(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, map[string]any{"finding": f, "history": h})
}

// maxAckBody bounds an acknowledgement's request body.
const maxAckBody = 16 << 10

// AckRequest is the body of POST /api/findings/{id}/ack.
type AckRequest struct {
	Reason string `json:"reason"`
}

// apiAck answers POST /api/findings/{id}/ack: acknowledges the finding for
// the identity the request's credentials name. A request without valid
// credentials, from another site, or not JSON, is refused before anything
// is read or written, and logged.
func (s *Server) apiAck(w http.ResponseWriter, r *http.Request) {
	who, err := s.authorize(r)
	if err != nil {
		s.log.Warn("acknowledgement refused", "finding", r.PathValue("id"), "remote", r.RemoteAddr, "err", err)
		// Challenge for a user and password only when no token was sent: a
		// browser answers the challenge with its login dialog.
		if errors.Is(err, errUnauthorized) && s.access.Basic() && !bearer(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="parsley-observe", charset="UTF-8"`)
		}
		code := http.StatusForbidden
		if errors.Is(err, errUnauthorized) {
			code = http.StatusUnauthorized
		}
		http.Error(w, err.Error(), code)
		return
	}
	id, err := findingID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req AckRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAckBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, badRequest{fmt.Errorf("acknowledge finding %d: body: want {\"reason\": \"...\"}: %v", id, err)})
		return
	}
	f, err := s.ack(r.Context(), id, who, req.Reason)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("finding acknowledged", "finding", id, "code", f.Code, "key", f.Key, "by", who, "reason", f.Ack.Reason, "remote", r.RemoteAddr)
	// Evaluate again now, so the metrics stop counting it at once rather
	// than at the observer's next evaluation.
	s.forget()
	if _, err := s.evaluateShared(r.Context()); err != nil {
		s.log.Warn("evaluate findings after an acknowledgement", "err", err)
	}
	writeJSON(w, f)
}

// authorize returns who may write with r, or why r is refused.
func (s *Server) authorize(r *http.Request) (string, error) {
	if s.access == nil {
		return "", fmt.Errorf("%w: acknowledging is off: start serve with --ack-tokens-file or --ack-users-file to say who may", errForbidden)
	}
	if why := crossSite(r); why != "" {
		return "", fmt.Errorf("%w: a cross-site or non-JSON request: %s", errForbidden, why)
	}
	who := s.access.identify(r)
	if who == "" {
		return "", fmt.Errorf("%w: send a bearer token (Authorization: Bearer ...) or a user and password that the server's access files name", errUnauthorized)
	}
	return who, nil
}

// forget drops the shared evaluation, so the next page shows a write.
func (s *Server) forget() {
	s.mu.Lock()
	s.cached = nil
	s.mu.Unlock()
}

// uiFinding renders a finding's page: what it is, the records it names,
// its history, and the acknowledgement form.
func (s *Server) uiFinding(w http.ResponseWriter, r *http.Request) {
	id, err := findingID(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	f, err := s.store.Finding(r.Context(), id)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	h, err := s.store.History(r.Context(), id)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	names, err := s.store.Names(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, "finding", map[string]any{
		"Title": fmt.Sprintf("Finding %d: %s", f.ID, f.Code), "Finding": f, "History": h, "Involved": involved(f, names),
		"AckOn": s.access != nil, "Basic": s.access.Basic(), "ResolvesBy": f.Code.ResolvesBy(), "DocsURL": docsURL, "TopicNames": names,
	})
}

// bearer reports whether r carries a bearer token.
func bearer(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	return len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ")
}

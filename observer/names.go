package observer

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// Names renders topic IDs as the topic names operators know. The store,
// findings' coordinates and graph node IDs key everything by topic ID,
// which stays exact when a topic is deleted and recreated under the same
// name; people read names. A name that several IDs share (a recreated
// topic) is shown with the first eight hex digits of each ID, as
// "orders~0ffa1149", and an ID with no known name stays as it is. Sender
// IDs of stage tasks the observer could name (see senders.go) read as
// "app/stage/partition".
type Names struct {
	byID    map[headers.TopicID]string
	shared  map[string]bool
	senders map[headers.SenderID]SenderName
}

// NamesOf returns the Names of an ID → name table.
func NamesOf(byID map[headers.TopicID]string) Names {
	n := Names{byID: byID, shared: map[string]bool{}}
	seen := map[string]bool{}
	for _, name := range byID {
		if seen[name] {
			n.shared[name] = true
		}
		seen[name] = true
	}
	return n
}

// WithSenders returns n naming senders too.
func (n Names) WithSenders(senders map[headers.SenderID]SenderName) Names {
	n.senders = senders
	return n
}

// Names returns the names of every topic the store knows by name, and of
// every sender seen whose stage task it could name.
func (s *Store) Names(ctx context.Context) (Names, error) {
	n, err := s.topicNames(ctx)
	if err != nil {
		return n, err
	}
	senders, err := s.senderNames(ctx)
	if err != nil {
		return n, err
	}
	return n.WithSenders(senders), nil
}

func (s *Store) topicNames(ctx context.Context) (Names, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT topic, name FROM channels WHERE name != ''`)
	if err != nil {
		return Names{}, fmt.Errorf("observer: topic names: %w", err)
	}
	defer rows.Close()
	byID := map[headers.TopicID]string{}
	for rows.Next() {
		var id []byte
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return Names{}, fmt.Errorf("observer: topic names: %w", err)
		}
		byID[headers.TopicID(id)] = name
	}
	if err := rows.Err(); err != nil {
		return Names{}, fmt.Errorf("observer: topic names: %w", err)
	}
	return NamesOf(byID), nil
}

// Topic returns how id is shown: its name, the name with an ID prefix
// when the name is shared, or the ID when no name is known.
func (n Names) Topic(id headers.TopicID) string {
	name, ok := n.byID[id]
	switch {
	case !ok:
		return id.String()
	case n.shared[name]:
		return name + "~" + id.String()[:8]
	}
	return name
}

// Sender returns how a sender is shown: its stage task as
// "app/stage/partition" when known, else its ID.
func (n Names) Sender(id headers.SenderID) string {
	if sn, ok := n.senders[id]; ok {
		return sn.String()
	}
	return id.String()
}

// SenderName returns a sender's stage task name, or "" when unknown.
func (n Names) SenderName(id headers.SenderID) string {
	if sn, ok := n.senders[id]; ok {
		return sn.String()
	}
	return ""
}

// Link returns a coordinate as a record page's path takes it: by topic
// name when the name is known and no other topic ID has it (the path then
// reads as the operator types it), else by topic ID.
func (n Names) Link(coord string) string {
	ref, err := ParseRef(coord)
	if err != nil || !ref.ByID {
		return coord
	}
	name, ok := n.byID[ref.ID]
	if !ok || n.shared[name] {
		return coord
	}
	return Ref{Topic: name, Partition: ref.Partition, Offset: ref.Offset}.String()
}

// Coordinate returns c as "topic/partition@offset" by name.
func (n Names) Coordinate(c headers.Coordinate) string {
	return n.Text(c.String())
}

// uuidText matches a topic ID as headers.TopicID.String writes it.
var uuidText = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// Text rewrites every topic ID in s — in coordinates, channels and
// sentences — as its name, and every sender ID of a known stage task as
// the task.
func (n Names) Text(s string) string {
	if len(n.byID) == 0 && len(n.senders) == 0 || !strings.Contains(s, "-") {
		return s
	}
	return uuidText.ReplaceAllStringFunc(s, func(m string) string {
		id, err := headers.ParseTopicID(m)
		if err != nil {
			return m
		}
		if _, ok := n.byID[id]; ok {
			return n.Topic(id)
		}
		if sn, ok := n.senders[headers.SenderID(id)]; ok {
			return sn.String()
		}
		return m
	})
}

// Named returns f with its summary by name and Names set: what people
// read, while Coordinates keep the exact IDs.
func (n Names) Named(f Finding) Finding {
	f.Summary = n.Text(f.Summary)
	f.Names = make([]string, len(f.Coordinates))
	for i, c := range f.Coordinates {
		f.Names[i] = n.Text(c)
	}
	return f
}

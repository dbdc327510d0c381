package observer

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// TopicStats summarise one observed topic's stamps.
type TopicStats struct {
	Name           string          `json:"name"`
	ID             headers.TopicID `json:"-"`
	IDText         string          `json:"id"`
	Partitions     int             `json:"partitions"`
	Records        int64           `json:"records"` // data records stored
	Markers        int64           `json:"markers"` // transaction markers stored
	Stamped        int64           `json:"stamped"`
	StampedShare   float64         `json:"stamped_share"`
	MeanEntries    float64         `json:"mean_entries"` // per stamped record
	MaxEntries     int64           `json:"max_entries"`
	MeanHeaderSize float64         `json:"mean_header_bytes"` // stamp header bytes per stamped record
	Undecodable    int64           `json:"undecodable"`
}

// Topics returns stamp statistics for every consumed topic, by name.
func (s *Store) Topics(ctx context.Context) ([]TopicStats, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT ch.name, ch.topic, count(DISTINCT ch.part),
			coalesce(sum(r.kind = 0), 0), coalesce(sum(r.kind = 1), 0), coalesce(sum(r.kind = 0 AND r.stamped), 0),
			coalesce(avg(CASE WHEN r.stamped THEN r.n_off + r.n_seq END), 0),
			coalesce(max(CASE WHEN r.stamped THEN r.n_off + r.n_seq END), 0),
			coalesce(avg(CASE WHEN r.stamped THEN r.hdr_bytes END), 0),
			coalesce(sum(r.err IS NOT NULL), 0)
		FROM channels ch LEFT JOIN records r ON r.ch = ch.id
		WHERE ch.start_off >= 0
		GROUP BY ch.topic ORDER BY ch.name, ch.topic`)
	if err != nil {
		return nil, fmt.Errorf("observer: topic statistics: %w", err)
	}
	defer rows.Close()
	var out []TopicStats
	for rows.Next() {
		var t TopicStats
		var id []byte
		if err := rows.Scan(&t.Name, &id, &t.Partitions, &t.Records, &t.Markers, &t.Stamped, &t.MeanEntries, &t.MaxEntries, &t.MeanHeaderSize, &t.Undecodable); err != nil {
			return nil, fmt.Errorf("observer: topic statistics: %w", err)
		}
		copy(t.ID[:], id)
		t.IDText = t.ID.String()
		if t.Records > 0 {
			t.StampedShare = float64(t.Stamped) / float64(t.Records)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

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

// Topics returns stamp statistics for every consumed topic, by name: in a
// group, of every channel any shard reads (each shard's from its owner).
func (s *Store) Topics(ctx context.Context) ([]TopicStats, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT ch.name, ch.topic, count(DISTINCT ch.part),
			coalesce(sum(st.n_data), 0), coalesce(sum(st.n_marker), 0), coalesce(sum(st.n_stamped + st.n_undecodable), 0),
			coalesce(sum(st.sum_entries) * 1.0 / nullif(sum(st.n_stamped), 0), 0),
			coalesce(max(st.max_entries), 0),
			coalesce(sum(st.sum_bytes) * 1.0 / nullif(sum(st.n_stamped), 0), 0),
			coalesce(sum(st.n_undecodable), 0)
		FROM channels ch LEFT JOIN all_stats st ON st.ch = ch.id
		WHERE ch.start_off >= 0 AND ch.owned OR NOT ch.owned AND EXISTS (SELECT 1 FROM remote_channels rc WHERE rc.ch = ch.id)
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

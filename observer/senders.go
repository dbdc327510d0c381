package observer

// Sender names. A Parsley stage task's sender ID is derived from
// (application ID, stage name, partition) by protocol.SenderIDFor, and
// every stage has a changelog topic "<app>-<stage>-changelog" with a
// partition per task. From the changelog topics it lists, the observer
// derives the sender ID of every task that could exist and keeps them;
// a sender seen in a stamp whose ID is among them is shown as
// "app/stage/partition". App and stage names may hold '-', so every split
// of a changelog topic's name is kept: only the true one can match a
// sender that was seen.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// SenderName is the stage task a sender ID belongs to.
type SenderName struct {
	App, Stage string
	Partition  int32
}

func (n SenderName) String() string {
	return n.App + "/" + n.Stage + "/" + strconv.FormatInt(int64(n.Partition), 10)
}

const changelogSuffix = "-changelog"

// changelogNames returns every (app, stage) split of a changelog topic's
// name, or none when name is not one.
func changelogNames(name string) [][2]string {
	base, ok := strings.CutSuffix(name, changelogSuffix)
	if !ok {
		return nil
	}
	var out [][2]string
	for i := 1; i < len(base)-1; i++ {
		if base[i] == '-' {
			out = append(out, [2]string{base[:i], base[i+1:]})
		}
	}
	return out
}

// SenderNamesOf returns the sender names a set of topics (name → partition
// count) implies: for every changelog topic, every task it could belong to.
func SenderNamesOf(topics map[string]int32) map[headers.SenderID]SenderName {
	out := map[headers.SenderID]SenderName{}
	for name, parts := range topics {
		for _, split := range changelogNames(name) {
			for p := range parts {
				out[protocol.SenderIDFor(split[0], split[1], p)] = SenderName{split[0], split[1], p}
			}
		}
	}
	return out
}

// AddSenderNames keeps sender names for later lookups; known ones are
// left as they are.
func (s *Store) AddSenderNames(ctx context.Context, names map[headers.SenderID]SenderName) error {
	if len(names) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: sender names: %w", err)
	}
	defer tx.Rollback()
	for id, n := range names {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO sender_names(sender, app, stage, part) VALUES(?, ?, ?, ?)`,
			id[:], n.App, n.Stage, n.Partition); err != nil {
			return fmt.Errorf("observer: sender names: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: sender names: %w", err)
	}
	return nil
}

// senderNames returns the names of the senders seen in stamps.
func (s *Store) senderNames(ctx context.Context) (map[headers.SenderID]SenderName, error) {
	// Only senders seen are named, which keeps the names to those in use;
	// a shard names those its group's findings name too, seen by others.
	q := `SELECT n.sender, n.app, n.stage, n.part FROM sender_names n JOIN senders s ON s.sender = n.sender`
	if s.sharded {
		q = `SELECT n.sender, n.app, n.stage, n.part FROM sender_names n`
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("observer: sender names: %w", err)
	}
	defer rows.Close()
	out := map[headers.SenderID]SenderName{}
	for rows.Next() {
		var id []byte
		var n SenderName
		if err := rows.Scan(&id, &n.App, &n.Stage, &n.Partition); err != nil {
			return nil, fmt.Errorf("observer: sender names: %w", err)
		}
		out[headers.SenderID(id)] = n
	}
	return out, rows.Err()
}

package state

// The layout of a task's store: which keys it holds and what names its
// changelog. Everything that reads or writes a task's state — the stage's
// tasks and standbys, and views in other processes — takes the layout from
// here, so it has one owner.
//
// A task's store holds three kinds of keys, apart by their first byte:
//
//   - the protocol node's keys (docs/protocol-state.md): ASCII, never
//     starting with a control byte; package protocol owns them, and
//     protocol.StateReader reads them back;
//   - fold state, one key per record key: 0x01 for the nil record key,
//     0x02 followed by the encoded record key otherwise (so the empty key
//     and the nil key differ);
//   - the tick slot (TickSlot): 0x03 "tick", the tick state of a stage
//     that folds its ticks (stage.TicksFold).
//
// TestKeyLayoutGolden pins these bytes: changing them strands every store
// and changelog written before, so change them only with a new layout and
// a migration.

const (
	foldNilKey = "\x01"
	foldPrefix = '\x02'
)

// TickSlot is the store key of a stage's tick state: 0x03 sorts apart from
// the nil key's fold state (0x01) and every other key's (0x02...).
const TickSlot = "\x03tick"

// FoldKey returns the store key of the fold state of a record key: 0x01 for
// nil, 0x02 and the key's bytes otherwise.
func FoldKey(key []byte) string {
	if key == nil {
		return foldNilKey
	}
	return string(foldPrefix) + string(key)
}

// IsFoldKey reports whether a store key holds a record key's fold state
// (not the protocol's state, not the tick slot).
func IsFoldKey(k string) bool {
	return k == foldNilKey || len(k) > 0 && k[0] == foldPrefix
}

// RecordKey returns the record key whose fold state k holds, aliasing k's
// bytes: isNil for the nil key, and ok false when k is no fold key.
func RecordKey(k string) (key string, isNil, ok bool) {
	switch {
	case k == foldNilKey:
		return "", true, true
	case len(k) > 0 && k[0] == foldPrefix:
		return k[1:], false, true
	}
	return "", false, false
}

// ChangelogTopic returns the name of a stage's changelog topic in
// application appID: "<appID>-<stage>-changelog".
func ChangelogTopic(appID, stage string) string { return appID + "-" + stage + "-changelog" }

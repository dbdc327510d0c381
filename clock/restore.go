package clock

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// Restore replaces the clock's claims with snapshot, a Snapshot taken
// earlier, for a transactional producer whose transaction aborted: take a
// Snapshot when the transaction begins and Restore it on abort. The sends
// folded in between (RecordProduced inside the transaction) are aborted
// records, and a writer names only committed records (parsley.causes
// constraint 8): a later stamp claiming one would hold readers that follow
// the newest Java rules until another record arrives on its channel.
// Within a transaction, claiming its earlier sends is fine: they commit or
// abort with the claiming record.
//
// Anything observed since the snapshot is forgotten too; fold it again. A
// snapshot naming the zero topic ID is refused and changes nothing.
func (c *Clock) Restore(snapshot *headers.Clock) error {
	if err := checkClock(snapshot); err != nil {
		return fmt.Errorf("clock: restore: %w", err)
	}
	c.mu.Lock()
	c.clk.CopyFrom(snapshot)
	c.enc, c.encOK = nil, false
	c.mu.Unlock()
	return nil
}

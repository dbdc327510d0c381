package bridge

import (
	"context"
	"testing"
	"time"
)

// TestLeaveOnShutdown: a bridge instance is a static member of its group.
// Stopped plainly it stays a member, so a restart finds its partitions
// waiting; stopped with LeaveOnShutdown (scale-in) it leaves, and its
// partitions can move at once.
func TestLeaveOnShutdown(t *testing.T) {
	for _, leave := range []bool{false, true} {
		name := "stays"
		if leave {
			name = "leaves"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2, "events")
			e.produce(rec("events", 0, "k0", "v0"), rec("events", 1, "k1", "v1"))
			cfg := e.config("events")
			cfg.SessionTimeout = 30 * time.Second // long enough to outlast the test
			cfg.LeaveOnShutdown = leave
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := e.start(b)
			waitFor(t, 30*time.Second, "2 messages", func() bool { return len(e.streamMsgs(testStream)) >= 2 })
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			groups, err := e.kafka.Admin().DescribeGroups(ctx, cfg.ApplicationID)
			if err != nil {
				t.Fatal(err)
			}
			var members []string
			for _, m := range groups[cfg.ApplicationID].Members {
				if m.InstanceID != nil {
					members = append(members, *m.InstanceID)
				}
			}
			if want := map[bool]int{false: 1, true: 0}[leave]; len(members) != want {
				t.Errorf("LeaveOnShutdown %v: group members %v after Run returned, want %d", leave, members, want)
			}
		})
	}
}

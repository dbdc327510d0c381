package observer_test

import (
	"strings"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/protocol"
)

func TestSenderNamesOfChangelogTopics(t *testing.T) {
	got := observer.SenderNamesOf(map[string]int32{"shop-gap-writer-changelog": 2, "orders": 3, "-changelog": 1, "x-changelog": 1})
	want := map[string]bool{
		"shop/gap-writer/0": true, "shop/gap-writer/1": true, // the true split
		"shop-gap/writer/0": true, "shop-gap/writer/1": true, // another, which no sender will match
	}
	if len(got) != len(want) {
		t.Errorf("%d names, want %d: %v", len(got), len(want), got)
	}
	for id, n := range got {
		if !want[n.String()] {
			t.Errorf("unexpected name %s", n)
		}
		if id != protocol.SenderIDFor(n.App, n.Stage, n.Partition) {
			t.Errorf("%s: ID %s is not the stage's derivation", n, id)
		}
	}
}

// TestFindingsNameSenders: findings about stage tasks' senders name them
// as app/stage/partition, from the changelog topics on the cluster.
func TestFindingsNameSenders(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	_, o := scan(t, ctx, c)
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for code, name := range map[observer.Code]string{
		observer.CodeSequenceGap:      obsdemo.App + "/" + obsdemo.GapStage + "/0",
		observer.CodeStampRegression:  obsdemo.App + "/" + obsdemo.RegressStage + "/0",
		observer.CodeLateJoinerWindow: obsdemo.App + "/" + obsdemo.RetiredStage + "/0",
	} {
		f, ok := byCode(fs, code, "")
		if !ok {
			t.Fatalf("no %s", code)
		}
		if !strings.Contains(f.Summary, "sender "+name) || strings.Contains(f.Summary, obsdemo.GapSender.String()) {
			t.Errorf("%s: %q, want the sender named %s", code, f.Summary, name)
		}
	}
}

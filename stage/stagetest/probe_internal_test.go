package stagetest

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStampsProbe: the runtime stamps every output, so no application can
// make it emit an unstamped record; the probe's check is exercised on
// records built by hand — unstamped, half-stamped, corrupt, and correct.
func TestStampsProbe(t *testing.T) {
	sink := stage.NewTopic("out", stage.String(), stage.String())
	good, err := headers.AppendStamp([]kgo.RecordHeader(nil), &headers.Stamp{Tagged: true, Sender: headers.SenderID{1}, Seq: 3}, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hs   []kgo.RecordHeader
		fail bool
	}{
		{"stamped", good, false},
		{"unstamped", nil, true},
		{"no sender tag", good[:1], true},
		{"corrupt vc", append([]kgo.RecordHeader{{Key: headers.HeaderVC, Value: []byte{0xff}}}, good[1:]...), true},
	} {
		r := &Report{}
		checkOutputs(r, sink, "out", []*kgo.Record{{Topic: "out", Key: []byte("k"), Value: []byte("v"), Headers: tc.hs}})
		if got := len(r.Failed(ProbeStamps)) > 0; got != tc.fail {
			t.Errorf("%s: stamps failures %v, want failure %v", tc.name, r.Failures, tc.fail)
		}
	}
}

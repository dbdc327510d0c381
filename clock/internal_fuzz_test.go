package clock

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// FuzzCheckVCTopics checks the byte scan against the walk over the decoded
// clock, on every value the vc decoder accepts.
func FuzzCheckVCTopics(f *testing.F) {
	var c headers.Clock
	c.SetOffset(headers.Channel{Topic: headers.TopicID{1}, Partition: 2}, 3)
	c.SetSeq(headers.Channel{Topic: headers.TopicID{4}}, headers.SenderID{5}, 6)
	good, _ := headers.EncodeVC(&c)
	f.Add(good)
	c.SetOffset(headers.Channel{}, 1)
	zeroOffset, _ := headers.EncodeVC(&c)
	f.Add(zeroOffset)
	c.DeleteOffset(headers.Channel{})
	c.SetSeq(headers.Channel{}, headers.SenderID{5}, 6)
	zeroSeq, _ := headers.EncodeVC(&c)
	f.Add(zeroSeq)
	f.Fuzz(func(t *testing.T, v []byte) {
		decoded, err := headers.DecodeVC(v)
		if err != nil {
			return
		}
		scan, walk := checkVCTopics(v), checkClock(decoded)
		if (scan == nil) != (walk == nil) {
			t.Fatalf("byte scan says %v, decoded walk says %v", scan, walk)
		}
	})
}

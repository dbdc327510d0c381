package protocol

import (
	"encoding/hex"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func hexBytes(b []byte) string { return hex.EncodeToString(b) }

// searchChannel is slices.BinarySearchFunc(chs, ch, headers.Channel.Compare)
// for a sorted chs, without an indirect call per probe and with an equality
// test first: PrepareSend searches the node's sent channels once per
// record, and usually finds the channel.
func searchChannel(chs []headers.Channel, ch headers.Channel) (int, bool) {
	lo, hi := 0, len(chs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if chs[m] == ch {
			return m, true
		}
		if chs[m].Compare(ch) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, false
}

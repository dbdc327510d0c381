package observer

import (
	"slices"
)

func sortChannels(cs []ChannelInfo) {
	slices.SortFunc(cs, func(a, b ChannelInfo) int { return a.Channel.Compare(b.Channel) })
}

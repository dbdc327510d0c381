package view

import "time"

// SetIncarnationCheck sets how often a running view checks its changelog's
// topic ID, until the returned func restores it.
func SetIncarnationCheck(d time.Duration) func() {
	was := incarnationCheck
	incarnationCheck = d
	return func() { incarnationCheck = was }
}

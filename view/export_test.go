package view

import "time"

// SetIncarnationCheck sets how often v, once running, checks its
// changelog's topic ID. Call it before Run.
func SetIncarnationCheck[K, S any](v *View[K, S], d time.Duration) { v.incarnationEvery = d }

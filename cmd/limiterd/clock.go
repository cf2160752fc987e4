//go:build !faultclock

package main

import "github.com/limiterd/limiterd/node"

// newClock is the clock every namespace reads. The release build reads the
// system clock; builds for the fault campaign (tag faultclock) can offset
// it.
func newClock(func(string) string) node.Clock { return node.SystemClock{} }

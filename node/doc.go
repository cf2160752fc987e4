// Package node is limiterd's counting engine: per-namespace sliding-window
// counters in sharded atomic memory.
//
// Windows are aligned to the Unix epoch (start = floor(t/size)·size). The
// sliding rate of a key at t, with c the current window and p the previous
// one, is
//
//	rate = count(c) + count(p) · (size − (t − start(c))) / size
//
// with the position measured in nanoseconds. Counts are int64 micro-hits
// (value × 10^6, rounded half away from zero), so fractional and negative
// values sum exactly and identically on every node.
//
// Each (key, window size) keeps two buckets — the current and the previous
// window — each with this node's own exact total and the other nodes' total
// as of the last fetch. The package reads no clock of its own and starts no
// goroutine except in Node.Run: the explicit-time methods (IncrementAt,
// RateAt, AllowAt) take the time, and the short forms read the injected
// Clock. Memory follows the keys active in the last two windows: Reclaim
// frees the rest, and a per-namespace cap refuses new keys past MaxKeys.
package node

// Package sync makes the nodes of a limiterd cluster converge through a
// shared Store. Import it as clustersync where the standard library's sync
// is also used.
//
// # Counting model
//
// Each node incarnation (node name plus a random id drawn at process start)
// writes its own absolute total per (namespace, window size, window start,
// key), with a version that only grows (max(now in µs, last+1)). A store
// applies a row only if its version is newer than the stored one; the
// cluster count of a window is the sum of all incarnations' rows. Hence:
//
//   - a retried, duplicated or late push is harmless: an older total never
//     overwrites a newer one and no total is added twice;
//   - a failed push is simply repeated by the next tick, because the
//     absolute total includes everything counted so far;
//   - a node's view of a window is its own exact total plus the other
//     incarnations' totals as of its last fetch, so its own hits never
//     vanish from its view while a push is in flight;
//   - a restarted node is a new incarnation: its previous life's rows keep
//     counting until they expire.
//
// # Modes
//
// A Syncer serves one namespace. Periodic namespaces (sync_rate > 0) tick
// at sync_rate: push the windows changed since their last successful push,
// then fetch the others' totals for the interest set (keys touched in the
// current or previous window). Synchronous namespaces (sync_rate = 0) write
// through on every call (IncrementAt, RateAt, AllowAt), bounded by
// CallTimeout, after which the call answers from local counts and the key
// stays dirty for a background tick at RetryPeriod. IncrementAt and
// RateAt send the key's current windows; the previous, closed ones go
// only with the first call after they closed and the first one
// CallTimeout later, and the background tick fetches what late pushes
// change in them. Local-only namespaces (sync_rate < 0) have no Syncer.
//
// Rows expire at window end + window size + 2 × sync_rate.
package sync

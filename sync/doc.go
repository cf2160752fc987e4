// Package sync makes the nodes of a limiterd cluster converge through a
// shared Store. Import it as clustersync where the standard library's sync
// is also used.
//
// Each node incarnation (NewIncarnation: node name plus a random id drawn
// at process start) writes its own absolute total per (namespace, window
// size, window start, key) as a Row, with a version that only grows
// (Versions). A store applies a row only if its version is newer than the
// stored one; the cluster count of a window is the sum of all
// incarnations' rows. A retried or late push is therefore harmless, and a
// failed one is repeated by the next tick. Rows expire at window end +
// window size + 2 × sync_rate.
//
// A Store has Push, Fetch and Close, and declares what else it can do
// (Store.Abilities, abilities.go): PushFetcher, GroupAllower (the
// store-side Allow; one Allow is a group of one), BucketStore,
// LeaseStore, ChangeReader and Windower. NewSyncer takes the declared
// interfaces once and refuses a mode the store cannot serve: a
// synchronous namespace needs the atomic decision (Decide). With a
// ChangeReader (changes.go has its protocol) a tick reads only the
// windows written since the last one. The strategy/strategytest suite
// checks a Store against this contract.
//
// A Syncer serves one shared node.Namespace (node.Config.Shared) in a
// Mode, Periodic or Synchronous, decoded from the config's sync_rate
// where the config is loaded:
//
//	sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: time.Second}, store, clustersync.NewIncarnation(name),
//		clustersync.NewVersions(time.Now), clustersync.Config{}, log, metrics)
//	go sy.Run(ctx) // ticks until ctx ends, then pushes one last time
//
// Periodic namespaces (sync_rate > 0) count in the namespace and tick at
// sync_rate: push the windows changed since their last successful push,
// then fetch the others' totals of the keys touched in the current or
// previous window. Their Allow calls escalate (buckets too, near their
// capacity) when the namespace escalates (escalate: auto, the
// default on a store that decides; Config.NoEscalate is never): decided
// in the node while clear of every limit by the hits the other nodes may
// have counted unseen, decided atomically by the store (a GroupAllower)
// inside that margin and for a key this node never fetched, and decided
// locally while the store is presumed down (see escalate.go). A key new to the node is fetched at
// once in the background. Synchronous namespaces (sync_rate = 0) write
// every IncrementAt, RateAt and AllowAt through and answer
// with the store's totals, or from local counts when the store does not
// answer within Config.CallTimeout; the tick, every RetryPeriod, pushes
// what such calls left behind. The calls of one key that arrive while its
// store call is in flight share the next one, each answered as if alone
// in arrival order (group commit, group.go).
//
// Token, leaky and fixed buckets go through the optional BucketStore: one
// shared state per bucket in the store, and per incarnation an absolute,
// versioned total of its consumption, so that a retried or late call
// applies nothing twice and loses nothing (bucket.go has the protocol and
// the argument; ApplyBuckets is its reference). A synchronous namespace's
// Allow on buckets is decided by the store; a periodic one decides
// locally on the store's last state plus its own takes since
// (bucketsync.go), and reads a bucket it never read before deciding.
package sync

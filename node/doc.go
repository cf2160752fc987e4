// Package node is limiterd's counting engine: per-namespace sliding-window
// counters in sharded atomic memory.
//
// A Namespace holds the counters of one configured namespace:
//
//	ns, err := node.NewNamespace(node.Config{Name: "api",
//		WindowSizes: []time.Duration{time.Second, time.Minute}}, nil)
//	rates, err := ns.IncrementAt(t, "10.0.0.1", 0, 1, nil) // size 0: every size
//	rates, err = ns.RateAt(t, "10.0.0.1", time.Minute, 0, rates[:0])
//	d, err := ns.AllowAt(t, ratelimit.AllowRequest{Key: "10.0.0.1", Cost: 1,
//		Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 100}}}, nil)
//
// Windows are aligned to the Unix epoch (start = floor(t/size)·size). The
// sliding rate of a key at t, with c the current window and p the previous
// one, is
//
//	rate = count(c) + count(p) · (size − (t − start(c))) / size
//
// with the position measured in nanoseconds. Counts are int64 micro-hits
// (value × 10^6, rounded half away from zero), so fractional and negative
// values sum exactly and identically on every node. Each (key, size) keeps
// the current and the previous window, each with this node's own exact
// total and the other nodes' total as of the last fetch.
//
// The methods take the time explicitly (IncrementAt, RateAt, AllowAt);
// the node reads its injected Clock only for its own work. Counting an existing key
// allocates nothing and takes no lock. Memory follows the keys active in
// the last two windows: Node.Run frees the rest, and
// MaxKeys caps new keys, refusing them or, with OnFull = OnFullEvict,
// evicting an idle key in their favour (see Stats.EvictedKeys and evict.go).
//
// An estimator namespace (Config.Estimator, local only) counts its windows
// in count-min sketches of a memory fixed at start instead: estimates never
// below the truth, no negative values, sliding-window limits only (see
// estimator.go).
//
// A namespace's Buckets hold token, leaky and fixed buckets, keyed by key
// and parameters; AllowAt checks a key's windows and buckets together.
//
// Package sync drives the rest: a Tick for its periodic ticks (TakeTick
// lists what to push and read, ApplyTick applies what was stored and
// read), and a KeyLock (LockKey, then
// Window, Add, Decide) for a synchronous call that holds one key across a
// store round trip. A periodic Allow goes through AllowMarginAt, which
// decides here while clear of every limit by a Margin (the other nodes'
// hits this node may not see yet) and otherwise reports the call near,
// for the store to decide under a KeyLock; OnNewKey and UnfetchedWindows
// let sync fetch a new key's other-node totals at once.
package node

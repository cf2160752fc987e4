// Package strategytest is the conformance suite every clustersync.Store
// must pass: the in-memory reference store, Redis, PostgreSQL and
// Cassandra run the same behaviours through Run.
//
//	func TestConformance(t *testing.T) {
//		strategytest.Run(t, func(t *testing.T) clustersync.Store {
//			return memory.New()
//		})
//	}
//
// Run calls newStore once per subtest. Every subtest writes under its own
// namespace, drawn from the test's name and a random suffix, so stores
// backed by a real server may share one server (and one schema, keyspace
// or key prefix) across subtests and runs; nothing is cleaned up but what
// expires. Run closes each store at the end of its subtest; newStore may
// register its own Close too (a second Close may return nil or an error
// wrapping clustersync.ErrClosed).
//
// What the suite checks, each in its own subtest: the round trip through
// Push, Fetch and Window; idempotent and version-checked pushes (a retried
// push counts once, an older version never overwrites a newer one, the
// newest of several rows for one window in one push wins); sums over
// incarnations, excluding the caller's own rows from Fetch; exact int64
// micro-hit totals (fractions, negatives, values beyond float64's 2^53);
// rows whose Acked hint is right, stale, wrong or names a newer version
// than the row's own, which must store exactly what they would without it;
// distinct windows for distinct sizes, starts, namespaces and keys,
// including keys holding '|', ':', spaces, U+0000 and non-ASCII text, and
// sub-second windows; expiry within a bounded poll (calling
// Purge(ctx) (int64, error) when the store has it); unknown windows reading
// 0; a 100 000-row push and fetch; concurrent pushes from 8 incarnations;
// cancelled contexts; errors after Close; and, when the store implements
// them, clustersync.PushFetcher and clustersync.AtomicAllower (exact
// admission under concurrency, CountRejected, the sliding formula over the
// previous window, several limits).
//
// Inputs stay inside what limiterd itself sends: keys are non-empty valid
// UTF-8 of at most 1 KiB, window starts are multiples of their sizes,
// namespaces are valid UTF-8 without U+0000, incarnations are
// clustersync.NewIncarnation names, and every row has an ExpireAt in the
// future (10 minutes unless the subtest is about expiry).
//
// Apart from the expiry poll, which sleeps 100 ms between reads for at most
// 15 s, the suite is deterministic: no sleep synchronises anything.
package strategytest

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
// Run calls newStore once per subtest and closes the store when the
// subtest ends (newStore may register its own Close too: a second Close
// returns an error wrapping clustersync.ErrClosed). Every subtest
// writes under its own namespace, drawn from the test's name and a random
// suffix, so stores backed by a real server may share one server, schema,
// keyspace or key prefix across subtests and runs; nothing is cleaned up
// but what expires.
//
// The subtests check round trips; idempotent, version-checked pushes; sums
// over incarnations that Fetch takes without the caller's own rows; exact
// int64 totals; distinct windows for distinct sizes, starts, namespaces
// and keys (keys holding '|', ':', spaces, U+0000, non-ASCII text);
// sub-second windows; expiry (calling Purge when the store has it);
// unknown windows reading 0; 100 000-row batches; concurrent pushes;
// cancelled contexts; errors after Close; and the abilities a store
// declares (Store.Abilities: clustersync.Windower, PushFetcher,
// GroupAllower (single Allows as groups of one, and groups),
// BucketStore, LeaseStore and ChangeReader), each of which
// it must implement; for one it does not declare, that a Syncer over it
// refuses what needs it cleanly or serves without it (changes.go:
// every write recorded, pushes that land late with older versions
// reported, pages, concurrent writers, lost and trimmed cursors through
// the ChangeTrimmer test hook). Group decisions, bucket and lease replies
// are compared with the references, clustersync.DecideGroup, ApplyBuckets
// and ApplyLease, run in the test; the lease subtests move their now
// forward by adding to it,
// starting a minute ahead of the wall clock so that a store dropping a
// key by the wall clock after its latest expiry drops nothing still live.
// Sums over every incarnation are read by Window when the store has it,
// else by a Fetch of an incarnation that never wrote.
//
// Fuzz (fuzz.go) searches between those examples: it decodes a fuzz
// input into a long sequence of window, bucket or lease calls, sends each
// to a store and to the Go engine, and fails at the first difference.
// Each store's package has one fuzz target per kind it serves, whose
// seeds CI runs as a smoke, and a mutant per store that the smoke must
// catch (TestFuzzCatchesMutants, through internal/mutant).
//
// Inputs stay inside what limiterd sends: valid non-empty UTF-8 keys of at
// most 1 KiB, starts that are multiples of their sizes, valid namespaces,
// NewIncarnation names, and an ExpireAt in the future. Apart from the
// expiry poll (every 100 ms, at most 15 s) no sleep synchronises anything.
package strategytest

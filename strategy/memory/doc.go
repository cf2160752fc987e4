// Package memory is the in-memory reference implementation of
// clustersync.Store, for tests only: it is not a user-facing strategy and
// cannot be selected in limiterd's configuration. Several in-process nodes
// sharing one *Store behave like a cluster sharing Redis, PostgreSQL or
// Cassandra, without a network:
//
//	store := memory.New()
//	a, _ := clustersync.NewSyncer(nsA, mode, store, clustersync.NewIncarnation("a"), versions, cfg, nil, nil)
//	b, _ := clustersync.NewSyncer(nsB, mode, store, clustersync.NewIncarnation("b"), versions, cfg, nil, nil)
//
// Store implements clustersync.Store and the optional PushFetcher,
// GroupAllower, Windower and ChangeReader exactly as
// package sync documents them (TrimChanges forgets a change log, for
// tests). A row
// whose ExpireAt is at or before the store's clock (WithClock) reads as
// absent; Purge drops expired rows at once.
//
// Faulty wraps any clustersync.Store and injects faults on demand: Fail
// makes every call return an error, Hang makes every call block until its
// context is done, Heal restores normal service, and Calls counts the calls
// made. It is meant for the sync loop's tests of outages and timeouts.
//
// Both types are safe for concurrent use.
package memory

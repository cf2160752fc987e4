// Package memory is the in-memory reference implementation of
// clustersync.Store, for tests only: it is not a user-facing strategy and
// cannot be selected in limiterd's configuration. Several in-process nodes
// sharing one *Store behave like a cluster sharing Redis, PostgreSQL or
// Cassandra, without a network.
//
// Store implements clustersync.Store, clustersync.PushFetcher and
// clustersync.AtomicAllower exactly as documented in package sync: one row
// per (WindowKey, incarnation), applied only when its version is newer than
// the stored one, summed on read. A row whose ExpireAt is at or before the
// store's clock reads as absent; expired rows are dropped lazily (a newer
// write replaces them, Purge drops them all) and by a sweep that writes run
// at most once per purge interval. The clock is injected with WithClock, so
// expiry is testable without sleeping.
//
// Faulty wraps any clustersync.Store and injects faults on demand: Fail
// makes every call return an error, Hang makes every call block until its
// context is done, Heal restores normal service, and Calls counts the calls
// made. It is meant for the sync loop's tests of outages and timeouts.
//
// Both types are safe for concurrent use.
package memory

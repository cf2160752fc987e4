// Package storetrace wraps a sync.Store so that every call to it, one
// store round trip, is an OpenTelemetry span: a child of the span in the
// call's context (a gRPC call's server span, a sync tick's), named
// "store <Method>", with the store's name, the rows or keys it carries and
// its error.
//
// The sync package finds a store's optional abilities (PushFetcher,
// AtomicAllower, Windower, BucketStore, LeaseStore) by type assertion, so
// Wrap returns a store with exactly the optional interfaces of the one it
// wraps: the Syncer takes the same paths with tracing on as off. The
// wrapper types for every combination are generated (gen.go).
package storetrace

//go:generate go run gen.go

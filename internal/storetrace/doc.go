// Package storetrace traces the store round trips a request makes: Hook
// is the sync.StoreTrace that makes each one an OpenTelemetry client span,
// a child of the caller's span (a gRPC call's server span), named
// "store <op>", with the store's name, the rows, limits or calls it
// carries, and its error. The sync loops' background ticks are not
// traced: the Syncer tells the hook only of calls made on a request's
// path, and a call whose context carries no span makes none.
package storetrace

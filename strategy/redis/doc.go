// Package redis is limiterd's Redis store: a clustersync.Store, with the
// optional clustersync.PushFetcher and clustersync.AtomicAllower, on a
// standalone server, Sentinel or Redis Cluster (Redis ≥ 7.0). Import it
// as redisstore.
//
// Open builds a client from a Config without contacting the server, so a
// node starts during a store outage; New wraps a go-redis client the
// caller already has (*redis.Client, *redis.ClusterClient, *redis.Ring):
//
//	s, err := redisstore.Open(cfg) // or redisstore.New(client, "limiterd")
//	if err != nil { ... }
//	defer s.Close()
//	syncer, err := clustersync.NewSyncer(ns, s, inc, versions, syncCfg, logger, metrics)
//
// Each window of a namespace is split by key into 64 Redis hashes (keys.go
// describes their names and fields), all windows of one key share a hash
// slot, so one script can decide an Allow over all of them, and a
// namespace spreads over 64 slots. Each incarnation's row holds its
// absolute total and version; a script applies a row only if its version
// is newer, and keeps each key's sum of totals beside the rows, so Window
// is one HGET and Fetch one HMGET per hash.
//
// The code by concern:
//
//	store.go            Store, New, Close
//	push.go             Push, PushFetch, Fetch, Window: batches, grouping by hash
//	allow.go            Allow
//	encode.go           the scripts' arguments and replies
//	layout.go           where each argument and reply value is, shared with the Lua
//	script.go, *.lua    the scripts and how they run
//	errors.go           which errors mean unavailable
//	keys.go             hash keys, fields, buckets
//
// Errors: connection failures, timeouts, a done ctx and transient server
// states (loading, failover, out of memory, …) wrap
// clustersync.ErrUnavailable; every call after Close returns
// clustersync.ErrClosed. An unknown window reads 0.
package redis

// Package redis is limiterd's Redis store: a clustersync.Store (with the
// optional clustersync.PushFetcher and clustersync.AtomicAllower) on a
// standalone server, Sentinel or Redis Cluster (Redis ≥ 7.0). Import it as
// redisstore.
//
// Open builds a client from a Config without contacting the server, so a
// node starts during a store outage; New wraps any go-redis client the
// caller already has (*redis.Client, *redis.ClusterClient, *redis.Ring).
//
// # Data layout
//
// Every window of every key is one Redis hash:
//
//	<prefix>:{<tag>}:<len(namespace)>:<namespace>:<len(key)>:<key>:<size ns>:<start ns>
//
// for example, window 1s starting at 1700000000 s of key "alice" in
// namespace "api":
//
//	limiterd:{36bd6c87b00d1130}:3:api:5:alice:1000000000:1700000000000000000
//
// Its fields:
//
//	+<incarnation>  "<total>:<version>:<expire-at ms>"  one per node incarnation
//	=               "<sum of all totals>"
//
// (canonical decimal int64: micro-hits, the row's version, Unix ms; the
// expiry is 0 when the row has none). The sum field is written with a
// window's first row and rewritten by the same HSET that changes a total,
// so Window is one HGET and the others' sum (Fetch) is sum − own from one
// HMGET, however many incarnations wrote the window.
//
// Keys are injective: the prefix holds no brace, the namespace and key are
// written as raw bytes after their length, and size and start are plain
// integers, so two distinct (namespace, size, start, key) tuples never share
// a Redis key — whatever bytes (| : { } spaces U+0000) the namespace or key
// hold. Fields are injective too: rows are "+" + incarnation, the sum is
// "=".
//
// # How keys spread over a cluster
//
// Redis Cluster places a key by its hash tag, the text between the first
// '{' and the next '}'. Here the tag is 16 hex digits of FNV-1a 64 of
// (namespace, key): a pure function of the user key's identity, which holds
// no brace, so braces inside user keys cannot move it.
//
//   - All windows of one (namespace, key) — current and previous, every
//     window size — share one slot, so the single Lua script of Allow may
//     read and write all of them (Cluster requires one slot per script).
//   - Different keys spread evenly over the 16384 slots. The tag hashes
//     the key with its namespace, never the namespace alone, so a busy
//     namespace does not become one hot slot; one very hot user key still
//     lives on one shard, as it must for Allow to be atomic.
//
// # Versions, expiry and batching
//
// A Lua script applies a row only if its version is newer than the stored
// one (compared exactly as decimal strings, not as Lua doubles) and moves
// the key's expiry to the row's ExpireAt (PEXPIREAT, milliseconds rounded
// up) unless it already expires later; a row whose expiry is not later
// than the one this incarnation stored before skips that check, and a
// window the row creates takes its expiry without a look. The sum is
// computed in Lua while every number is below 10^15 (exact in a double),
// else by HINCRBY, so int64 totals stay exact. A row of total 0 and
// version 0 (a window its incarnation never stored, which a synchronous
// call sends to read the others' totals) creates nothing.
//
// Push, Fetch and PushFetch send at most 1000 windows per pipelined round
// trip, at most two round trips in flight. Push and PushFetch are scripts:
// on a single server (a *redis.Client: standalone or Sentinel) one script
// call covers up to 100 windows of any keys; on a cluster or ring it
// covers the consecutive windows of one (namespace, key). Fetch sends one
// HMGET per window, which costs the server less than reading in a script.
// Allow is one EVALSHA. After NOSCRIPT (a restarted or failed-over server)
// the affected calls are re-sent once as EVAL.
//
// # Errors
//
// Connection failures, timeouts, a done ctx and transient server states
// (LOADING, failover, OOM, …) wrap clustersync.ErrUnavailable; every call
// after Close returns clustersync.ErrClosed. An unknown window reads 0.
package redis

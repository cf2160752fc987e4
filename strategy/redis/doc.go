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
// The rows of one window of a namespace are split by key into 64 buckets,
// and each (window, bucket) is one Redis hash:
//
//	<prefix>:{<tag>}:<bucket>:<len(namespace)>:<namespace>:<size ns>:<start ns>
//
// for example, the 1s window starting at 1700000000 s of namespace "api"
// for key "alice", whose bucket is 48:
//
//	limiterd:{7a40d4628a79ad4a}:48:3:api:1000000000:1700000000000000000
//
// A key's bucket is FNV-1a 64 of (namespace, key) modulo 64. For key k the
// hash holds:
//
//	+<len(inc)>:<inc>:<k>  "<total>:<version>:<expire-at ms>"  one per node incarnation
//	=<k>                   "<sum of all totals>"
//
// (canonical decimal int64: micro-hits, the row's version, Unix ms; the
// expiry is 0 when the row has none). The sum field is written with a
// key's first row and rewritten by the same HSET that changes a total, so
// Window is one HGET and the others' sum (Fetch) is sum − own, however
// many incarnations wrote the window. One HMGET reads, and one HSET
// writes, the rows of many keys of a bucket: a tick costs the server a
// few commands per hundred rows, not two per row. A new hash gets one
// field "~" with an 80-byte value, which makes Redis keep it as a hash
// table (with the default hash-max-listpack-value of 64): a listpack
// would scan all of a big bucket's fields on every lookup.
//
// Keys and fields are injective: the prefix holds no brace, the namespace
// is written as raw bytes after its length, size, start and bucket are
// plain integers, and the incarnation in a row field is length-prefixed,
// so two distinct (namespace, size, start, key, incarnation) never share a
// field — whatever bytes (| : { } spaces U+0000) they hold. Sum fields
// start with '=', rows with '+'.
//
// # How keys spread over a cluster
//
// Redis Cluster places a key by its hash tag, the text between the first
// '{' and the next '}'. Here the tag is 16 hex digits of FNV-1a 64 of
// (namespace, bucket), which holds no brace, so braces inside namespaces or
// keys cannot move it.
//
//   - All windows of one (namespace, key) — current and previous, every
//     window size — share one slot, so the single Lua script of Allow may
//     read and write all of them (Cluster requires one slot per script).
//   - A namespace spreads over the slots of its 64 buckets, so a busy
//     namespace is never one hot slot; different namespaces take
//     different slots. A namespace gains nothing from more than 64
//     shards, and one very hot user key still lives on one shard, as it
//     must for Allow to be atomic.
//
// # Versions, expiry and batching
//
// A Lua script applies a row only if its version is newer than the stored
// one (compared exactly as decimal strings, not as Lua doubles). A hash
// expires at the latest ExpireAt of its rows (PEXPIREAT, milliseconds
// rounded up): a row whose expiry is the one its incarnation stored before
// needs no look at the hash's expiry. The sum is computed in Lua while
// every number is below 10^15 (exact in a double), else by HINCRBY, so
// int64 totals stay exact. A row of total 0 and version 0 (a window its
// incarnation never stored, which a synchronous call sends to read the
// others' totals) creates nothing.
//
// Push, Fetch and PushFetch send at most 1000 rows per pipelined round
// trip, at most two round trips in flight. Push and PushFetch are one
// script: on a single server (a *redis.Client: standalone or Sentinel)
// one call covers up to 100 rows of any hashes; on a cluster or ring it
// covers hashes of one hash tag. The windows of one key (what a
// synchronous call sends) go in one call of a leaner script, with the
// fields and rows built by the client: a stored row that is exactly the
// one a Row's Acked hint names is replaced without being parsed (the
// client sends the hint only with a newer version and totals below
// 10^15); any other stored row is decided by version as usual. A window
// repeated in one batch goes in a later call, so it applies after the
// first as separate calls would.
// Fetch sends one HMGET per hash, which costs the server less than
// reading in a script. Allow is one EVALSHA, which takes the same hint
// for the current windows. After NOSCRIPT (a restarted or failed-over
// server) the affected calls are re-sent once as EVAL.
//
// # Errors
//
// Connection failures, timeouts, a done ctx and transient server states
// (LOADING, failover, OOM, …) wrap clustersync.ErrUnavailable; every call
// after Close returns clustersync.ErrClosed. An unknown window reads 0.
package redis

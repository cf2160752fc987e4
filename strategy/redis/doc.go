// Package redis is limiterd's Redis store: a clustersync.Store, with the
// optional clustersync.PushFetcher, clustersync.GroupAllower (one
// allow script, a single Allow being a group of one),
// clustersync.BucketStore,
// clustersync.LeaseStore and clustersync.ChangeReader, on a standalone
// server, Sentinel or Redis Cluster (Redis ≥ 7.0). Import it as
// redisstore.
//
// Open builds a client from a Config without contacting the server, so a
// node starts during a store outage; New wraps a go-redis client the
// caller already has (*redis.Client, *redis.ClusterClient, *redis.Ring):
//
//	s, err := redisstore.Open(cfg) // or redisstore.New(client, "limiterd")
//	if err != nil { ... }
//	defer s.Close()
//	syncer, err := clustersync.NewSyncer(ns, mode, s, inc, versions, syncCfg, logger, metrics)
//
// Each window of a namespace is split by key into 64 Redis hashes (keys.go
// describes their names and fields), all windows of one key share a hash
// slot, so one script can decide an Allow over all of them, and a
// namespace spreads over 64 slots. Each incarnation's row holds its
// absolute total and version; a script applies a row only if its version
// is newer, and keeps each key's sum of totals beside the rows, so Window
// is one HGET and Fetch one HMGET per hash.
//
// Token, leaky and fixed buckets (BucketStore) have one hash per bucket,
// "<prefix>:{<tag>}:b:<len(ns)>:<ns>:<BucketSpec.StoreKey()>", under the
// hash tag of the key's windows, so one script decides all buckets of a
// call atomically, in one round trip and, on a cluster, in one slot. Its
// fields: l (level, micro-hits), m (mark, Unix ns), s (write count), and
// per incarnation "<life>:<applied>:<version>" under its row prefix. The
// hash expires (PEXPIREAT) at the latest ExpireAt sent. The script is a
// port of clustersync.ApplyBuckets; since Lua numbers are doubles, it
// holds every int64 past 2^52 (instants, long refill times, lives) as two
// exact parts, and gets from Go what needs a floored division of a
// signed instant (a fixed bucket's period start) and a new row's state.
//
// Concurrency leases (LeaseStore) of a (namespace, key) live in two keys
// under the hash tag of the key's windows,
// "<prefix>:{<tag>}:ls:<len(ns)>:<ns>:<key>" and ":li:" in place of
// ":ls:": a sorted set whose scores are all 0, so it orders by member,
// with member "l" + t + id per live lease (t its expiry) and "r" + t + id
// per remembered release (t its until), and a hash from "l" + id and
// "r" + id to t, to find an id. t is the Unix ns time as 16 hexadecimal
// digits that sort as the int64s do, so dropping what is at or before now
// is one ZREMRANGEBYLEX, the earliest live expiry the first member, and
// Lua compares times exactly (a double cannot hold a Unix ns). One script
// call applies all of a call's ops of one key, in order, atomically (a
// port of clustersync.ApplyLease); the calls for several keys go in one
// pipeline per 1000 ops. Both keys expire (PEXPIREAT, ms rounded up) no earlier than
// the latest expiry or until written, computed from the caller's times,
// which are assumed close to the wall clock.
//
// The code by concern:
//
//	store.go            Store, New, Close
//	push.go             Push, PushFetch, Fetch, Window: batches, grouping by hash
//	group.go            AllowGroup: a single Allow or a group, one script
//	buckets.go          Buckets: the bucket hashes' keys, the script's arguments
//	leases.go           Leases: the lease keys, times, grouping by key
//	encode.go           the scripts' arguments and replies
//	layout.go           where each argument and reply value is, shared with the Lua
//	                    (the allow script's: group_layout.go)
//	script.go, *.lua    the scripts and how they run
//	errors.go           which errors mean unavailable
//	keys.go             hash keys, fields, buckets
//	changes.go          Changes: the change logs (lib.lua), cursors
//
// Change logs (ChangeReader): each call of the push, key and allowgroup
// scripts adds to a sorted set of each bucket it wrote,
// "<prefix>:{<tag>}:<bucket>:<len(ns)>:<ns>:c", one member listing the
// windows it wrote there, scored by a sequence the script takes from
// Redis TIME and the log's last one; a log keeps a minute. A push groups
// its rows by hash across the whole batch, so a tick of thousands of rows
// adds a member or two per log. The scripts reach a log, and the changes
// script the hashes it names, by names built from their KEYS: all share
// the KEYS' hash tag, hence their slot.
//
// Errors: connection failures, timeouts, a done ctx and transient server
// states (loading, failover, out of memory, …) wrap
// clustersync.ErrUnavailable; every call after Close returns
// clustersync.ErrClosed. An unknown window reads 0.
package redis

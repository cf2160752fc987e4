package redis

import (
	"context"
	"fmt"
	"math"
	"strconv"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Leases applies ops at now as clustersync.LeaseStore specifies: the ops
// of each (namespace, key), in their order, in one call of the leases
// script (a port of clustersync.ApplyLease, see leases.lua), so a key's
// ops are applied together atomically (up to 1000 of them). Ops of
// several keys go as pipelined script calls, one round trip per 1000
// ops; on a cluster each script call touches one slot.
//
// Keys are independent, so gathering the ops of a key that other keys'
// ops separate changes no reply, and spares script calls.
func (s *Store) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: leases: %w", clustersync.ErrClosed)
	}
	if len(replies) != len(ops) {
		return fmt.Errorf("redis: leases: len(replies) = %d, want len(ops) = %d", len(replies), len(ops))
	}
	for i := range ops {
		if leaseKind(ops[i].Kind) == nil {
			return fmt.Errorf("redis: leases: op %d: unknown kind %d", i, ops[i].Kind)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return s.fail("leases", err)
	}
	if len(ops) <= rowsPerRoundTrip && oneLeaseKey(ops) {
		call := encodeLeases(s.prefix, now, ops, nil)
		reply, err := leasesScript.Run(ctx, scripter{s.c}, call.keys, call.args...).Slice()
		if err != nil {
			return s.fail("leases", err)
		}
		return decodeLeases(reply, nil, replies)
	}
	// Script calls of up to rowsPerRoundTrip ops of one key, in pipelines
	// of up to rowsPerRoundTrip ops, one after the other. A key with more
	// ops than that has its later ones in later pipelines, so a failed
	// call leaves each key with a prefix of its ops applied.
	pieces := leasePieces(leaseGroups(ops), rowsPerRoundTrip)
	for lo := 0; lo < len(pieces); {
		hi, n := lo, 0
		for hi < len(pieces) && n+len(pieces[hi]) <= rowsPerRoundTrip {
			n += len(pieces[hi])
			hi++
		}
		calls := make([]scriptCall, hi-lo)
		for p := lo; p < hi; p++ {
			calls[p-lo] = encodeLeases(s.prefix, now, ops, pieces[p])
		}
		if err := runScripts(ctx, s.c, leasesScript, calls); err != nil {
			return s.fail("leases", err)
		}
		for p := lo; p < hi; p++ {
			reply, err := calls[p-lo].cmd.Slice()
			if err != nil {
				return s.fail("leases", err)
			}
			if err := decodeLeases(reply, pieces[p], replies); err != nil {
				return err
			}
		}
		lo = hi
	}
	return nil
}

// leaseKind is op kind k as the script takes it (nil for an unknown
// one): a constant in an interface, which costs no allocation.
func leaseKind(k clustersync.LeaseOpKind) any {
	switch k {
	case clustersync.LeaseAcquire:
		return "a"
	case clustersync.LeasePut:
		return "p"
	case clustersync.LeaseRelease:
		return "r"
	case clustersync.LeaseRenew:
		return "n"
	case clustersync.LeaseCount:
		return "c"
	case clustersync.LeaseClear:
		return "x"
	}
	return nil
}

// oneLeaseKey reports whether ops are all of one (namespace, key), as a
// synchronous call sends them: one script call, no pipeline.
func oneLeaseKey(ops []clustersync.LeaseOp) bool {
	for i := 1; i < len(ops); i++ {
		if ops[i].Namespace != ops[0].Namespace || ops[i].Key != ops[0].Key {
			return false
		}
	}
	return true
}

// leaseGroups returns the indices of ops grouped by (namespace, key), the
// groups in the order of their first op, each group's ops in order.
func leaseGroups(ops []clustersync.LeaseOp) [][]int {
	at := make(map[[2]string]int)
	var groups [][]int
	for i := range ops {
		k := [2]string{ops[i].Namespace, ops[i].Key}
		g, ok := at[k]
		if !ok {
			g = len(groups)
			at[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// leasePieces cuts groups into pieces of at most n ops, in order.
func leasePieces(groups [][]int, n int) [][]int {
	pieces := groups[:0:0]
	for _, g := range groups {
		for lo := 0; lo < len(g); lo += n {
			pieces = append(pieces, g[lo:min(lo+n, len(g))])
		}
	}
	return pieces
}

// leaseTimeLen is the length of a leaseTime.
const leaseTimeLen = 16

// appendLeaseTime appends t as a leaseTime: uint64(t) with its sign bit
// flipped, as 16 lowercase hexadecimal digits, so that leaseTimes sort
// (as bytes) and compare as the int64s do, across the sign too.
func appendLeaseTime(b []byte, t int64) []byte {
	const digits = "0123456789abcdef"
	u := uint64(t) ^ 1<<63
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[u>>uint(shift)&0xf])
	}
	return b
}

// parseLeaseTime is the inverse of appendLeaseTime.
func parseLeaseTime(s string) (int64, error) {
	if len(s) != leaseTimeLen {
		return 0, fmt.Errorf("unexpected lease time %q", s)
	}
	u, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected lease time %q", s)
	}
	return int64(u ^ 1<<63), nil
}

// unixMilliCeilNs is Unix ns t in Unix ms, rounded up: a key holding t
// expires no earlier than t.
func unixMilliCeilNs(t int64) int64 {
	ms := t / 1_000_000
	if t%1_000_000 > 0 {
		ms++
	}
	return ms
}

// appendLeasesKey appends the Redis key of one (namespace, key)'s lease
// set (kind 's') or index (kind 'i'), with the hash tag of the key's
// windows:
//
//	<prefix>:{<tag>}:l<kind>:<len(ns)>:<ns>:<key>
//
// A window's hash has a number where this one has "ls" or "li", a
// bucket's "b"; the namespace is length-prefixed, so no two keys collide.
func appendLeasesKey(b []byte, prefix string, tag [tagLen]byte, kind byte, ns, key string) []byte {
	b = append(b, prefix...)
	b = append(b, ":{"...)
	b = append(b, tag[:]...)
	b = append(b, "}:l"...)
	b = append(b, kind, ':')
	b = strconv.AppendInt(b, int64(len(ns)), 10)
	b = append(b, ':')
	b = append(b, ns...)
	b = append(b, ':')
	return append(b, key...)
}

// leaseKeys returns the Redis keys of the lease set and index of
// (ns, key).
func leaseKeys(prefix, ns, key string) [2]string {
	tag := bucketTag(ns, bucketOf(ns, key))
	return [2]string{
		string(appendLeasesKey(nil, prefix, tag, 's', ns, key)),
		string(appendLeasesKey(nil, prefix, tag, 'i', ns, key)),
	}
}

// encodeLeases encodes the leases script's call for ops[idx] (all of ops
// when idx is nil), ops of one (namespace, key), at now.
func encodeLeases(prefix string, now int64, ops []clustersync.LeaseOp, idx []int) scriptCall {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	op := func(j int) *clustersync.LeaseOp {
		if idx != nil {
			return &ops[idx[j]]
		}
		return &ops[j]
	}
	first := op(0)
	keys := make([]string, leasesKeysWidth)
	a := newArgv(leasesOp(0).at(n))
	s := newStrs(2*(hashKeyLen(prefix, first.Namespace)+len(first.Key))+(n+2)*leaseTimeLen, len(keys)+n+2)
	tag := bucketTag(first.Namespace, bucketOf(first.Namespace, first.Key))
	s.b = appendLeasesKey(s.b, prefix, tag, 's', first.Namespace, first.Key)
	s.cut(&keys[leasesKeysSet])
	s.b = appendLeasesKey(s.b, prefix, tag, 'i', first.Namespace, first.Key)
	s.cut(&keys[leasesKeysIndex])
	s.b = appendLeaseTime(s.b, now)
	s.cut(a.str(int(leasesHeadNow)))
	if now == math.MaxInt64 {
		s.b = append(s.b, 'g') // past every leaseTime
	} else {
		s.b = appendLeaseTime(s.b, now+1)
	}
	s.cut(a.str(int(leasesHeadAfter)))
	for j := range n {
		o := op(j)
		a.args[leasesOpKind.at(j)] = leaseKind(o.Kind)
		a.args[leasesOpLease.at(j)] = &o.ID
		a.int(leasesOpLimit.at(j), o.Limit)
		s.b = appendLeaseTime(s.b, o.Expiry)
		s.cut(a.str(leasesOpExpiry.at(j)))
		a.int(leasesOpExpireAt.at(j), unixMilliCeilNs(o.Expiry))
	}
	s.done()
	return scriptCall{keys: keys, args: a.args}
}

// decodeLeases writes the leases script's reply into replies[idx] (all
// of replies when idx is nil).
func decodeLeases(reply []any, idx []int, replies []clustersync.LeaseReply) error {
	n := len(replies)
	if idx != nil {
		n = len(idx)
	}
	if len(reply) != leasesReply(0).at(n) {
		return fmt.Errorf("redis: leases: unexpected reply %v for %d ops", reply, n)
	}
	for j := range n {
		ok, okOK := reply[leasesReplyGranted.at(j)].(int64)
		held, okHeld := reply[leasesReplyHeld.at(j)].(int64)
		next, okNext := reply[leasesReplyNext.at(j)].(string)
		if !okOK || !okHeld || !okNext {
			return fmt.Errorf("redis: leases: unexpected reply %v", reply[leasesReplyGranted.at(j):leasesReplyWidth.at(j)])
		}
		r := clustersync.LeaseReply{OK: ok == 1, Held: held}
		if next != "" {
			t, err := parseLeaseTime(next)
			if err != nil {
				return fmt.Errorf("redis: leases: %w", err)
			}
			r.Next = t
		}
		i := j
		if idx != nil {
			i = idx[j]
		}
		replies[i] = r
	}
	return nil
}

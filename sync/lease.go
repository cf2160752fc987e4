package sync

import (
	"context"
	"math"
)

// Concurrency leases across the cluster.
//
// A store keeps, per (namespace, key), the set of live leases (lease id →
// expiry) and the set of released ids (id → until when the release is
// remembered). Times are Unix nanoseconds on the callers' clocks, which
// are assumed NTP-synchronised. Every operation first drops the leases
// and releases whose time is at or before the call's now, then:
//
//   - LeaseAcquire adds the id if fewer than Limit leases are live
//     (synchronous namespaces: the store decides). An id already live is
//     a replay: granted again, counted once, its expiry the later of the
//     two. A released id is never granted again.
//   - LeasePut adds the id or moves its expiry later, whatever the count
//     (periodic namespaces push the leases they granted themselves); it
//     answers OK = false when the id was released, so the granting node
//     learns of a release made elsewhere.
//   - LeaseRelease removes the id (OK: it was live) and remembers the
//     release until the later of Expiry and the lease's own expiry, so a
//     Put or Acquire that arrives late cannot bring it back.
//   - LeaseRenew sets a live id's expiry (OK: it was live).
//   - LeaseClear (a Reset of the key's leases) releases every live id of
//     the key as LeaseRelease does, each remembered until the later of
//     Expiry and its own expiry (OK: some id was live). A periodic node
//     that granted one of them learns it from its next Put (OK = false),
//     as of any release; a lease a node granted but had not Put yet is
//     not in the store, and survives.
//   - LeaseCount only reads.
//
// Every operation is idempotent: sent twice, it leaves the set as sent
// once, so a call that failed can always be retried. Ops whose Expiry is
// at or before now change nothing and answer OK = false (LeaseRelease
// and LeaseClear excepted: they still remove the ids).
//
// A store keeps a key's sets at least until its latest expiry, and may
// drop them after it.

// LeaseOpKind is what a LeaseOp does.
type LeaseOpKind uint8

// The lease operations.
const (
	LeaseAcquire LeaseOpKind = iota + 1
	LeasePut
	LeaseRelease
	LeaseRenew
	LeaseCount
	LeaseClear
)

func (k LeaseOpKind) String() string {
	switch k {
	case LeaseAcquire:
		return "acquire"
	case LeasePut:
		return "put"
	case LeaseRelease:
		return "release"
	case LeaseRenew:
		return "renew"
	case LeaseCount:
		return "count"
	case LeaseClear:
		return "clear"
	}
	return "unknown"
}

// LeaseOp is one operation on one key's leases.
type LeaseOp struct {
	Kind           LeaseOpKind
	Namespace, Key string
	// ID is the lease's id as the store keeps it (node.LeaseTick's OpID
	// and StoreID);
	// empty for LeaseCount and LeaseClear.
	ID string
	// Limit is the most live leases LeaseAcquire grants up to.
	Limit int64
	// Expiry is the lease's expiry (Acquire, Put, Renew) or until when a
	// release is remembered at least (Release, Clear), Unix ns.
	Expiry int64
}

// LeaseReply is the store's answer to one LeaseOp.
type LeaseReply struct {
	// OK: Acquire granted (or replayed); Put, Release, Renew found the
	// lease live (Put: and not released); Count always.
	OK bool
	// Held is the number of live leases of the key after the op.
	Held int64
	// Next is the earliest expiry among them (0: none live).
	Next int64
}

// LeaseStore is the optional store of concurrency leases. Leases applies
// ops in order, each atomically as the doc above says, at now (Unix ns),
// and writes one reply per op into replies (len(replies) == len(ops)).
// On error any prefix of the ops may have been applied; retrying them is
// safe.
type LeaseStore interface {
	Leases(ctx context.Context, now int64, ops []LeaseOp, replies []LeaseReply) error
}

// LeaseSet is one key's leases as the reference implementation keeps
// them: live ids and remembered releases, each with its time.
type LeaseSet struct {
	Live, Released map[string]int64
}

// Expiry is the latest time in s (0: empty): after it s holds nothing.
func (s *LeaseSet) Expiry() int64 {
	var e int64
	for _, t := range s.Live {
		e = max(e, t)
	}
	for _, t := range s.Released {
		e = max(e, t)
	}
	return e
}

// ApplyLease is the reference of one LeaseStore op, for stores that
// decide in Go (the memory store) and for the conformance suite: it
// applies op to s (creating its maps as needed) at now and returns the
// reply.
func ApplyLease(s *LeaseSet, now int64, op LeaseOp) LeaseReply {
	if s.Live == nil {
		s.Live = map[string]int64{}
	}
	if s.Released == nil {
		s.Released = map[string]int64{}
	}
	for id, t := range s.Live {
		if t <= now {
			delete(s.Live, id)
		}
	}
	for id, t := range s.Released {
		if t <= now {
			delete(s.Released, id)
		}
	}
	var ok bool
	live, isLive := s.Live[op.ID]
	_, released := s.Released[op.ID]
	valid := op.Expiry > now
	switch op.Kind {
	case LeaseAcquire:
		switch {
		case !valid || released:
		case isLive:
			s.Live[op.ID], ok = max(live, op.Expiry), true
		case int64(len(s.Live)) < op.Limit:
			s.Live[op.ID], ok = op.Expiry, true
		}
	case LeasePut:
		if valid && !released {
			s.Live[op.ID], ok = max(live, op.Expiry), true
		}
	case LeaseRelease:
		ok = isLive
		delete(s.Live, op.ID)
		if until := max(op.Expiry, live, s.Released[op.ID]); until > now {
			s.Released[op.ID] = until
		}
	case LeaseRenew:
		if valid && isLive {
			s.Live[op.ID], ok = op.Expiry, true
		}
	case LeaseCount:
		ok = true
	case LeaseClear:
		for id, t := range s.Live {
			ok = true
			delete(s.Live, id)
			if until := max(op.Expiry, t, s.Released[id]); until > now {
				s.Released[id] = until
			}
		}
	}
	r := LeaseReply{OK: ok, Held: int64(len(s.Live))}
	if r.Held > 0 {
		r.Next = math.MaxInt64
		for _, t := range s.Live {
			r.Next = min(r.Next, t)
		}
	}
	return r
}

package sync

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Buckets across the cluster (token, leaky and fixed).
//
// A store keeps one row per bucket: its shared state (level and mark, as
// ratelimit.BucketState), a write count Seq, and per incarnation a record of
// the consumption it applied from that incarnation: {Life, Applied,
// Version}. Every call carries the caller's own consumption of the bucket
// as an absolute total (Total, in the node's life Life of the bucket) and
// a Version that grows with every call of the incarnation. The store:
//
//  1. catches up: when Total is more than the record's Applied, it applies
//     the difference to the state (ratelimit.BucketSpec.Force, at ApplyAt) and
//     records Total. Consumption the node counted while the store was away
//     thus arrives once, whenever a call gets through;
//  2. decides the take (if any) with ratelimit.TakeBuckets, all buckets of the
//     call or none, and adds what it consumed to Applied;
//  3. records Version.
//
// A call that takes nothing (a tick's read, a catch-up alone) leaves the
// state as steps 1 and 3 left it, not brought to the call's time: a
// state is a function of time, and one brought to a reader's time would
// take the consumption a later call catches up as of then, losing the
// refills or drips between its own time and the reader's (a leaky
// bucket emptied by then would drip from the reader's time).
//
// Why nothing is lost or counted twice: a total is absolute, so a retried,
// duplicated or late call applies only what the record does not hold yet,
// and an older total than the recorded one applies nothing. A call whose
// Version the record already holds is a replay: it changes nothing and
// answers from the record (admitted if Applied grew by the take). A node
// that creates a bucket anew (after reclaiming an idle one) starts a new
// Life, whose record starts at 0, so its new totals are never mistaken for
// old ones; a call of an older Life changes nothing. Rows expire when a
// bucket can no longer differ from a new one (BucketCall.ExpireAt).
//
// A reset (BucketCall.Reset, a Reset of the bucket) is a call like any
// other that, after the catch-up of step 1, replaces the shared state by
// a new bucket's at the call's time (ratelimit.BucketSpec.Init(at)) and bumps
// Seq. The records stay as they are, so the totals they hold are never
// applied again: what every incarnation consumed before the reset (the
// caller's own included, caught up first) is forgotten, and what another
// node consumed but had not sent yet arrives with its next call, on top
// of the new state. A reset replayed with the same Version changes
// nothing more; a reset sent again with a new Version resets again. A
// node that missed it takes the new state with its next call's answer,
// as it takes any state (BucketReply.After, a higher Seq).

// BucketCall is one bucket of a BucketStore call.
type BucketCall struct {
	Namespace string
	Bucket    ratelimit.BucketSpec
	// Life is the caller's life of the bucket: it grows when the node
	// holds the bucket anew.
	Life int64
	// Total is the caller's consumption of the bucket in Life before this
	// call, in micro-hits; ApplyAt the time the part the store does not
	// hold yet is applied at (Unix ns, 0: none): for a token or leaky
	// bucket that part's first take, for a fixed bucket its last (see
	// node's noteConsumed).
	Total, ApplyAt int64
	// Version grows with every call of the incarnation.
	Version int64
	// ExpireAt is when the row may go: At + the bucket's Hold + 2 ×
	// sync_rate. Stores keep the latest of the ones they are sent.
	ExpireAt time.Time
	// Reset makes the call, once caught up, replace the bucket's state by
	// a new bucket's at the call's time (the package doc says how). A
	// reset call takes nothing (take 0).
	Reset bool
}

// BucketReply is the store's answer for one bucket of a call.
type BucketReply struct {
	// Before is the state the take was decided from (after the catch-up);
	// After the state the call left, what a node takes as the bucket's.
	Before, After ratelimit.BucketState
	// Applied is the caller's consumption in its Life the store now
	// holds, the take's included.
	Applied int64
	// Seq is the row's write count after the call.
	Seq int64
}

// BucketStore is the optional store of buckets. Buckets applies calls
// (one per bucket, all of one key and of incarnation inc) atomically as
// the package doc says: a take of take micro-hits at at (Unix ns) decided
// for all of them or none (take 0 only syncs: catch up and read). It
// writes the answers into replies (len(replies) == len(calls)) and
// reports whether the take was admitted. On error the calls may or may
// not have been applied; a later call with a new Version and the same or
// greater totals is always safe.
type BucketStore interface {
	Buckets(ctx context.Context, inc string, at, take int64, calls []BucketCall, replies []BucketReply) (allowed bool, err error)
}

// BucketRow is a bucket's row as the reference implementation keeps it.
type BucketRow struct {
	State    ratelimit.BucketState
	Seq      int64
	Incs     map[string]BucketInc
	ExpireAt time.Time
}

// BucketInc is a row's record of one incarnation.
type BucketInc struct {
	Life, Applied, Version int64
}

// ApplyBuckets is the reference of BucketStore.Buckets, for stores that
// decide in Go (the memory store; Cassandra under a lightweight
// transaction): it applies calls to rows (rows[i] of calls[i]; nil for a
// row the store does not hold, which it then creates) and writes the
// replies. changed[i] reports whether rows[i] must be written back.
func ApplyBuckets(inc string, at, take int64, calls []BucketCall, rows []*BucketRow, replies []BucketReply, changed []bool) (allowed bool) {
	n := len(calls)
	specs := make([]ratelimit.BucketSpec, 0, n)
	states := make([]ratelimit.BucketState, 0, n)
	replayOK, replays := true, 0
	for i := range calls {
		c := &calls[i]
		changed[i] = false
		if rows[i] == nil {
			start := at
			if c.ApplyAt != 0 && c.Total > 0 {
				start = min(start, c.ApplyAt)
			}
			rows[i] = &BucketRow{State: c.Bucket.Init(start), Incs: map[string]BucketInc{}}
			changed[i] = true
		}
		r := rows[i]
		rec := r.Incs[inc]
		switch {
		case c.Life < rec.Life, c.Life == rec.Life && c.Version < rec.Version:
			// Late: a newer call of this incarnation went first.
			replays++
			replayOK = false
		case c.Life == rec.Life && c.Version == rec.Version:
			replays++
			replayOK = replayOK && rec.Applied-c.Total >= take
		default:
			if c.Life > rec.Life {
				rec = BucketInc{Life: c.Life}
			}
			if c.Total > rec.Applied {
				c.Bucket.Force(&r.State, max(c.ApplyAt, 0), c.Total-rec.Applied)
				rec.Applied = c.Total
			}
			if c.Reset {
				r.State = c.Bucket.Init(at)
			}
			rec.Version = c.Version
			r.Incs[inc] = rec
			changed[i] = true
		}
		if c.ExpireAt.After(r.ExpireAt) {
			r.ExpireAt = c.ExpireAt
			changed[i] = true
		}
		replies[i].Before = r.State
		specs = append(specs, c.Bucket)
		states = append(states, r.State)
	}
	switch {
	case replays == n:
		allowed = replayOK
	case replays > 0:
		allowed = false // a call partly replayed decides nothing
	default:
		used := make([]int64, n)
		allowed = ratelimit.TakeBuckets(specs, states, used, at, take)
		for i := range calls {
			if take != 0 && (states[i] != rows[i].State || used[i] != 0) {
				rows[i].State = states[i]
				rec := rows[i].Incs[inc]
				rec.Applied += used[i]
				rows[i].Incs[inc] = rec
				changed[i] = true
			}
		}
	}
	for i := range calls {
		r := rows[i]
		if changed[i] {
			r.Seq++
		}
		replies[i].After = r.State
		replies[i].Applied = r.Incs[inc].Applied
		if r.Incs[inc].Life != calls[i].Life {
			replies[i].Applied = 0
		}
		replies[i].Seq = r.Seq
	}
	return allowed
}

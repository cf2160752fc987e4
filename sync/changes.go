package sync

import (
	"context"
	"errors"
)

// ErrChangesLost is returned by ChangeReader.Changes when the store can no
// longer tell what changed since the cursor: its change log was trimmed
// past it or lost (a flush, a failover to a replica that lagged), or the
// cursor is not one it issued for that namespace. The reader then reads
// its whole interest set again, from a new cursor.
var ErrChangesLost = errors.New("sync: changes since cursor lost")

// Cursor is a position in one namespace's change log, as a ChangeReader
// returned it. It is opaque to the caller; the empty Cursor means none.
type Cursor string

// Change is one window whose rows some incarnation wrote since a cursor,
// with the sum of every other incarnation's total but the reader's, as
// Fetch would return it at the time of the read.
type Change struct {
	WindowKey
	Others int64
}

// ChangeReader is the optional "what changed since" read of a namespace,
// which lets a tick cost what changed rather than what the node holds.
//
// The protocol:
//
//   - Every write that applies a row (Push, PushFetch, GroupAllower.AllowGroup,
//     any other) records the row's window in the namespace's change log at
//     a sequence the STORE assigns when it writes. Versions cannot serve:
//     they come from each writer's clock and pushes land out of order, so
//     a read of "version > V" misses a late push with an older version.
//   - Changes(ctx, inc, ns, "", ...) returns no changes and the current
//     cursor: every write not yet visible to that read is reported by a
//     later read from it. A reader takes it BEFORE it reads its interest
//     set in full, so nothing written during that read is missed.
//   - Changes(ctx, inc, ns, c, limit, dst) appends to dst, at most limit
//     at a time (more reports that another call from next continues),
//     every window of ns written since c, with the others' sum as of this
//     read. Where a store's commit order can differ from its sequence
//     order (PostgreSQL), a read covers from an earlier point, so a write
//     that commits after a later one is still reported. Writes by inc
//     itself change no others' sum: a store should skip them (the tick
//     pushes without reading back). A window may be reported more than
//     once; a reader applies the changes of one read in order (a later one
//     of the same window is newer).
//   - An expiring row records nothing: its window no longer counts.
//   - When the log cannot answer for c, Changes returns an error wrapping
//     ErrChangesLost, never a partial answer that looks complete.
//
// Cursors are per namespace: a cursor of another namespace or store reads
// as lost, or as an older position of this one (never as a newer one).
//
// The stores: strategy/memory (the reference, one counter), Redis (per
// hash tag of a namespace a sorted set with a member per write script
// call, listing the windows it wrote, scored by a counter the script
// advances, trimmed by age, read in one pipelined round trip) and PostgreSQL (rows carry the writing transaction's id; a read
// starts at the oldest transaction still running at the previous read)
// implement it. Cassandra does not: its rows are partitioned by window, a
// per-namespace log would be one hot partition (or a read of every one),
// and its writes have no order a reader can resume from; its nodes keep
// fetching the whole interest set.
type ChangeReader interface {
	Changes(ctx context.Context, inc, namespace string, since Cursor, limit int, dst []Change) (changes []Change, next Cursor, more bool, err error)
}

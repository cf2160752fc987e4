package sync

import (
	"context"
	"time"
)

// GroupAllower is the optional store-side Allow: it decides several
// requests of one key, one after the other, in one atomic step. Every
// store-side decision goes through it; a single Allow is a group of one
// entry. A synchronous namespace hands it the Allows of a hot key that
// queued while the key's previous store call was in flight, so one round
// trip decides them all (see group.go). Stores without it cannot decide:
// the node decides from fetched totals.
//
// In one atomic step the store:
//
//  1. reads the other incarnations' totals of every window's Cur and Prev;
//  2. decides the entries in order against this incarnation's totals as
//     the entries before it left them: an entry is admitted iff, for
//     every one of its limits (window w, limit L), in float64,
//     (own(w) + othersCur(w)) + (Prev.Total + othersPrev(w)) × (Size − (At − Cur.Start)) / Size + Cost ≤ L,
//     where own(w) starts at Windows[w].Cur.Total; when the entry is
//     admitted, or CountRejected, its Cost is added to own of every window
//     of the request (an Allow counts in every window size);
//  3. writes every window's Prev row as sent and its Cur row with Total =
//     the final own, with Cur.Version, each version-checked like Push.
//
// DecideGroup is that decision in Go, the reference every store must
// match. The caller serialises the group calls of a key within its
// incarnation (and sends its exact own totals). A group of several
// entries keeps its totals and costs within ±2^53, where float64
// arithmetic is exact; a group of one may carry any totals, and the
// store writes its Cur rows exactly (in int64) whatever their size.
//
// allowed (len(req.Entries)) and others (len(req.Windows), [0] the current
// window, [1] the previous one, as read before the writes) are the
// caller's and are written. On error nothing in them is to be used, and
// the rows may or may not have been written.
type GroupAllower interface {
	AllowGroup(ctx context.Context, req *GroupAllowRequest, allowed []bool, others [][2]int64) error
}

// GroupAllowRequest is a group of Allow requests of one key of one
// incarnation, to decide in order at one time.
type GroupAllowRequest struct {
	Inc string
	// At is the decision time of every entry, in Unix nanoseconds.
	At int64
	// Windows are the window sizes the entries' limits check, each at
	// most once: this incarnation's own rows of its current window (the
	// one holding At) and previous window as they are before the group.
	Windows []GroupWindow
	// Entries are the Allow requests in the order they are decided.
	Entries []GroupEntry
}

// GroupWindow is one window size of a GroupAllowRequest.
type GroupWindow struct {
	Size time.Duration
	Cur  Row
	Prev Row
}

// GroupEntry is one Allow request of a group.
type GroupEntry struct {
	Cost          int64 // micro-hits, ≥ 0
	CountRejected bool
	Limits        []GroupLimit
}

// GroupLimit is one limit of a GroupEntry: at most Limit micro-hits in the
// sliding window of GroupAllowRequest.Windows[Window].
type GroupLimit struct {
	Window int
	Limit  int64
}

// DecideGroup decides req as GroupAllower specifies, given the other
// incarnations' totals others[w] of each window, read in the same atomic
// step. It writes each entry's decision into allowed and the own total of
// each window's Cur row to write into cur (len(req.Windows)).
func DecideGroup(req *GroupAllowRequest, others [][2]int64, allowed []bool, cur []int64) {
	var counted int64
	for i := range req.Entries {
		e := &req.Entries[i]
		ok := true
		for _, l := range e.Limits {
			w := &req.Windows[l.Window]
			if !admits(w, req.At, w.Cur.Total+counted, others[l.Window], e.Cost, l.Limit) {
				ok = false
			}
		}
		allowed[i] = ok
		if ok || e.CountRejected {
			counted += e.Cost
		}
	}
	for w := range req.Windows {
		cur[w] = req.Windows[w].Cur.Total + counted
	}
}

// admits reports whether cost more fits under limit in window w at, with
// this incarnation's current total own: the sliding formula, in float64.
func admits(w *GroupWindow, at, own int64, others [2]int64, cost, limit int64) bool {
	cur := float64(own + others[0])
	prev := float64(w.Prev.Total + others[1])
	rate := cur + prev*float64(w.Size-time.Duration(at-w.Cur.Start))/float64(w.Size)
	return rate+float64(cost) <= float64(limit)
}

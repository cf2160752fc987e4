// Package accuracy measures how closely a cluster of limiterd nodes holds
// a sliding-window limit: an in-process cluster (one node.Namespace,
// sync.Syncer and service.Service per node, over real stores) under an
// open-loop Allow load, and an exact oracle every decision is judged
// against. It serves the tests that measure escalation (sync/escalate.go);
// nothing in limiterd's serving path imports it.
package accuracy

import (
	"cmp"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Call is one Allow decision as the cluster took it.
type Call struct {
	At      int64 // decision time, Unix ns (the request's at)
	Seq     int64 // send order, to order equal times
	Key     int32
	Allowed bool
	// Back marks a call on a key its node held before while the whole
	// cluster left it alone a window or more: one a node may have
	// reclaimed and remember (set by Measure).
	Back bool
}

// Verdict is the oracle's judgement of a run's calls.
type Verdict struct {
	Calls, Admitted int
	// WronglyAdmitted: admitted where the oracle refuses; WronglyRefused:
	// refused where it admits.
	WronglyAdmitted, WronglyRefused int
	// AtLimit counts the calls the oracle admits into a key's last whole
	// call of room (after them a call of the same cost no longer fits):
	// those two nodes, each seeing that room, could both admit unless one
	// asks the store, so about as many calls escalate at least.
	AtLimit int
	// BackCalls and BackWronglyAdmitted count the calls marked Back and
	// those of them wrongly admitted.
	BackCalls, BackWronglyAdmitted int
	// Mean is the mean number admitted per complete window of the key
	// admitted most; Worst the most admitted in any one window of any key,
	// complete or not (windows aligned to the epoch).
	Mean, Worst float64
	// Windows is the number of complete windows Mean is over.
	Windows int
	// WorstAt is the start of the worst window.
	WorstAt time.Time
}

// Wrong returns the wrongly decided calls as a share of all.
func (v Verdict) Wrong() float64 {
	if v.Calls == 0 {
		return 0
	}
	return float64(v.WronglyAdmitted+v.WronglyRefused) / float64(v.Calls)
}

// window is the oracle's sliding window of one key.
type window struct {
	start     int64 // current window start
	cur, prev int64 // micro-hits
}

// Judge replays calls in decision-time order through one exact sliding
// window per key of the given size and limit (cost 1 each), fed with
// every hit the cluster admitted, and counts the decisions at or after
// from it disagrees with. from and to bound the windows Mean and Worst
// count (Mean the complete ones). It sorts calls.
func Judge(calls []Call, size time.Duration, limit float64, from, to time.Time) Verdict {
	slices.SortFunc(calls, func(a, b Call) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Seq, b.Seq))
	})
	sz := int64(size)
	lim := float64(limit) * ratelimit.Micro
	keys := map[int32]*window{}
	type kw struct {
		key   int32
		start int64
	}
	admitted := map[kw]int64{}
	perKey := map[int32]int{}
	var v Verdict
	for _, c := range calls {
		w := keys[c.Key]
		if w == nil {
			w = &window{start: ratelimit.WindowStart(c.At, size)}
			keys[c.Key] = w
		}
		ws := ratelimit.WindowStart(c.At, size)
		switch {
		case ws == w.start:
		case ws == w.start+sz:
			w.prev, w.cur, w.start = w.cur, 0, ws
		case ws > w.start:
			w.prev, w.cur, w.start = 0, 0, ws
		}
		rate := ratelimit.SlidingRate(w.cur, w.prev, size, c.At-ws)
		oracle := rate+ratelimit.Micro <= lim
		if c.Allowed {
			w.cur += ratelimit.Micro
		}
		if c.At < from.UnixNano() {
			continue // fed to the oracle, not judged
		}
		v.Calls++
		if oracle && rate+2*ratelimit.Micro > lim {
			v.AtLimit++
		}
		if c.Back {
			v.BackCalls++
		}
		switch {
		case c.Allowed && !oracle:
			v.WronglyAdmitted++
			if c.Back {
				v.BackWronglyAdmitted++
			}
		case !c.Allowed && oracle:
			v.WronglyRefused++
		}
		if c.Allowed {
			v.Admitted++
			admitted[kw{c.Key, ws}]++
			perKey[c.Key]++
		}
	}
	var top int32
	for k, n := range perKey {
		if n > perKey[top] || n == perKey[top] && k < top {
			top = k
		}
	}
	var sum int64
	for k, n := range admitted {
		if float64(n) > v.Worst || float64(n) == v.Worst && k.start < v.WorstAt.UnixNano() {
			v.Worst, v.WorstAt = float64(n), time.Unix(0, k.start)
		}
		if k.key == top && k.start >= from.UnixNano() && k.start+sz <= to.UnixNano() {
			sum += n
		}
	}
	for s := ratelimit.WindowStart(from.UnixNano()+sz-1, size); s+sz <= to.UnixNano(); s += sz {
		v.Windows++
	}
	if v.Windows > 0 {
		v.Mean = float64(sum) / float64(v.Windows)
	}
	return v
}

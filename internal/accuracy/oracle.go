// Package accuracy measures how closely a cluster of limiterd nodes holds
// a limit (a sliding window, or a token, leaky or fixed bucket): an
// in-process cluster (one node.Namespace, sync.Syncer and service.Service
// per node, over real stores) under an open-loop Allow load, and an exact
// oracle every decision is judged against. It serves the tests that
// measure escalation (sync/escalate.go) and the accuracy grid; nothing in
// limiterd's serving path imports it.
package accuracy

import (
	"cmp"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Call is one Allow decision as the cluster took it.
type Call struct {
	At      int64 // decision time, Unix ns (service.Decision.At)
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

// keyOracle is the exact limit of every key: what a call of cost one at
// t would get, and the admitted calls fed to it.
type keyOracle interface {
	// decide reports whether the exact limit admits a call on key at t,
	// and whether that call takes the key's last whole call of room (a
	// second at t would be refused).
	decide(key int32, t int64) (admit, last bool)
	// admitted counts a call the cluster admitted on key at t, even one
	// the exact limit refuses.
	admitted(key int32, t int64)
}

// windowOracle is one exact sliding window per key.
type windowOracle struct {
	size time.Duration
	lim  float64 // micro-hits
	keys map[int32]*window
}

// at brings key's window to t and returns it with t's window start.
func (o *windowOracle) at(key int32, t int64) (*window, int64) {
	w := o.keys[key]
	ws := ratelimit.WindowStart(t, o.size)
	if w == nil {
		w = &window{start: ws}
		o.keys[key] = w
	}
	switch sz := int64(o.size); {
	case ws == w.start:
	case ws == w.start+sz:
		w.prev, w.cur, w.start = w.cur, 0, ws
	case ws > w.start:
		w.prev, w.cur, w.start = 0, 0, ws
	}
	return w, ws
}

func (o *windowOracle) decide(key int32, t int64) (bool, bool) {
	w, ws := o.at(key, t)
	rate := ratelimit.SlidingRate(w.cur, w.prev, o.size, t-ws)
	ok := rate+ratelimit.Micro <= o.lim
	return ok, ok && rate+2*ratelimit.Micro > o.lim
}

func (o *windowOracle) admitted(key int32, t int64) {
	w, _ := o.at(key, t)
	w.cur += ratelimit.Micro
}

// bucketOracle is one exact bucket per key, decided with ratelimit's own
// arithmetic (BucketSpec.Take), as a store decides it.
type bucketOracle struct {
	spec ratelimit.BucketSpec
	keys map[int32]*ratelimit.BucketState
}

func (o *bucketOracle) state(key int32, t int64) *ratelimit.BucketState {
	s := o.keys[key]
	if s == nil {
		st := o.spec.Init(t)
		s = &st
		o.keys[key] = s
	}
	return s
}

func (o *bucketOracle) decide(key int32, t int64) (bool, bool) {
	s := *o.state(key, t) // a copy: deciding changes nothing
	if !o.spec.Take(&s, true, t, ratelimit.Micro, false).Allowed {
		return false, false
	}
	return true, !o.spec.Take(&s, true, t, ratelimit.Micro, false).Allowed
}

// admitted takes the call's hit as the cluster took it: past the bucket's
// capacity too, as a store's state is forced with what nodes admitted.
func (o *bucketOracle) admitted(key int32, t int64) {
	o.spec.Force(o.state(key, t), t, ratelimit.Micro)
}

// Judge replays calls in decision-time order through one exact sliding
// window per key of the given size and limit (cost 1 each), fed with
// every hit the cluster admitted, and counts the decisions at or after
// from it disagrees with. from and to bound the windows Mean and Worst
// count (Mean the complete ones). It sorts calls.
func Judge(calls []Call, size time.Duration, limit float64, from, to time.Time) Verdict {
	return judge(calls, &windowOracle{size: size, lim: limit * ratelimit.Micro, keys: map[int32]*window{}}, size, from, to)
}

// JudgeLimit is Judge for a limit of any kind: a sliding window, or one
// exact bucket per key fed with every hit the cluster admitted (a call
// the exact bucket refuses but the cluster admitted is taken past its
// capacity, as Force does). Mean and Worst count the admitted calls per
// window of size.
func JudgeLimit(calls []Call, l ratelimit.Limit, size time.Duration, from, to time.Time) (Verdict, error) {
	if l.Kind == ratelimit.WindowLimit {
		return Judge(calls, l.Size, l.Limit, from, to), nil
	}
	spec, err := ratelimit.SpecOf(&l)
	if err != nil {
		return Verdict{}, err
	}
	return judge(calls, &bucketOracle{spec: spec, keys: map[int32]*ratelimit.BucketState{}}, size, from, to), nil
}

func judge(calls []Call, o keyOracle, size time.Duration, from, to time.Time) Verdict {
	slices.SortFunc(calls, func(a, b Call) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Seq, b.Seq))
	})
	sz := int64(size)
	type kw struct {
		key   int32
		start int64
	}
	admitted := map[kw]int64{}
	perKey := map[int32]int{}
	var v Verdict
	for _, c := range calls {
		oracle, last := o.decide(c.Key, c.At)
		if c.Allowed {
			o.admitted(c.Key, c.At)
		}
		if c.At < from.UnixNano() {
			continue // fed to the oracle, not judged
		}
		v.Calls++
		if last {
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
			admitted[kw{c.Key, ratelimit.WindowStart(c.At, size)}]++
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

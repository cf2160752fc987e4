package node

import (
	"time"
	"unicode/utf8"

	"github.com/limiterd/limiterd/ratelimit"
)

// Margin tells AllowMarginAt how close to a limit a node of a periodic
// namespace may still decide alone.
//
// The node sees the other nodes' hits only as of its last fetch: their
// newest hits stay unseen for up to Blind (2 × sync_rate + the tick's
// duration). A decision is clear of a limit when the key's rate, plus the
// cost, plus the hits the others are expected to count over Blind (their
// recent rate × Blind × Safety) stays under it.
type Margin struct {
	// Blind is how long the other nodes' newest hits may go unseen.
	Blind time.Duration
	// Safety multiplies the other nodes' expected hits; 1 expects exactly
	// their recent rate.
	Safety float64
	// Unfetched reports a key whose other nodes' totals were never
	// fetched here as near; otherwise such a key is decided here from the
	// node's own hits.
	Unfetched bool
	// Known has bit i set when the node knows the other nodes' totals of
	// every key, held or not, for the namespace's i-th window size
	// (ascending): a key never fetched is not near on account of that
	// for a request whose limits are all of such sizes.
	Known uint32
}

// AllowMarginAt decides like AllowAt while the request is clear of every
// limit by m. When it would be admitted only inside the margin, or (with
// m.Unfetched) when the other nodes' totals of its key were never fetched
// here, it counts nothing and returns near = true: the caller asks the
// store to decide. A request
// that does not fit even by the node's own view is refused here: the
// others' totals only grow, so the view never exceeds the cluster's count.
//
// The other nodes' recent rate is read from the key's totals, with no
// state of its own (see othersAhead).
//
// A request with bucket limits is near when a bucket would be left
// without room for the others' expected consumption (bucketsNear; m's
// Unfetched and Known then do not apply: a bucket never read from the
// store is read before, by the caller); its window limits are decided
// as AllowAt does, with no margin. Estimator namespaces are decided by
// AllowAt (near is then false). Like AllowAt it does not allocate for an
// existing key.
func (ns *Namespace) AllowMarginAt(t time.Time, req ratelimit.AllowRequest, m Margin, dst []ratelimit.LimitStatus) (d ratelimit.Decision, near bool, err error) {
	var buf [MaxLimits]microLimit
	lims, cost, kinds, err := ns.checkAllow(&req, buf[:])
	if err != nil {
		return ratelimit.Decision{Limits: dst}, false, err
	}
	if kinds {
		return ns.allowKindsWith(t, &req, lims, cost, &m, nil, dst)
	}
	if ns.est != nil {
		d, err := ns.AllowAt(t, req, dst)
		return d, false, err
	}
	e, err := ns.acquireLocked(req.Key)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, false, err
	}
	defer e.mu.Unlock()
	tn := t.UnixNano()
	age := int64(e.age(tn))
	var dc decision
	var ahead [MaxLimits]float64
	for i, l := range lims {
		lims[i].ws = ratelimit.WindowStart(tn, time.Duration(l.size))
		c, p := e.slot(l.idx).buckets(lims[i].ws, l.size)
		dc.cur[i], dc.prev[i] = total(c), total(p)
		ahead[i] = othersAhead(c, p, tn-lims[i].ws, l.size, age, cost, m)
	}
	n := len(lims)
	decide(&dc, tn, cost, lims, dc.cur[:n], dc.prev[:n], req.CountRejected)
	if dc.allowed {
		unseen := m.Unfetched && !e.fetched() && !known(lims, m.Known)
		inside := false
		for i, l := range lims {
			r := ratelimit.SlidingRate(dc.cur[i]-cost, dc.prev[i], time.Duration(l.size), tn-l.ws)
			if r+float64(cost)+ahead[i] > float64(l.limit) {
				inside = true
			}
		}
		if inside || unseen {
			return ratelimit.Decision{Limits: dst}, true, nil
		}
	}
	e.setOver(!dc.allowed)
	if dc.counted {
		ns.countAll(e, tn, cost)
	}
	return dc.finish(dst, lims, req.Limits), false, nil
}

// known reports whether every limit's window size is in the mask.
func known(lims []microLimit, mask uint32) bool {
	for _, l := range lims {
		if mask&(1<<l.idx) == 0 {
			return false
		}
	}
	return true
}

// othersAhead returns the micro-hits the other nodes are expected to
// count in a window of size over m.Blind, from the key's current window c
// (pos into it) and previous one p: the larger of the others' recent rate
// and this node's own, times Blind and Safety.
//
// A recent rate is the larger of the previous window's total and the
// current one's over the time it had to grow: pos, or the key's age
// (since it was first decided here) when younger, but at least
// min(Blind, size/4), so that a key's first hits do not read as a storm.
// This node's own rate stands in for the others' when they start
// together (a key new to all nodes, whose others' totals, fetched at its
// start, show no rate yet): under balancing that spreads a key's calls,
// each node counts about as fast as this one.
//
// Hits come whole: on a key with a few hits per window, the expected
// count over Blind is a fraction of one, yet one unseen call of the same
// cost is what admits past the limit. So a key with any recent hits
// expects at least one more such call.
func othersAhead(c, p *bucket, pos, size, age, cost int64, m Margin) float64 {
	var oc, op, wc, wp int64
	if c != nil {
		oc, wc = c.others.Load(), c.own.Load()
	}
	if p != nil {
		op, wp = p.others.Load(), p.own.Load()
	}
	grew := max(min(pos, age), min(int64(m.Blind), size/4), 1)
	span := float64(size) / float64(grew)
	perWindow := max(float64(op), float64(oc)*span, float64(wp), float64(wc)*span, 0)
	if perWindow == 0 {
		return 0
	}
	return max(perWindow*float64(m.Blind)/float64(size)*m.Safety, float64(cost))
}

// OnNewKey sets fn to be told every key the namespace inserts (its own
// copy of the key), nil to stop. fn is called while the key's shard is
// locked: it must not block and must not call into the namespace.
func (ns *Namespace) OnNewKey(fn func(key string)) {
	if fn == nil {
		ns.newKey.Store(nil)
		return
	}
	ns.newKey.Store(&fn)
}

// UnfetchedWindows appends to dst key's current and previous windows at
// now, for every size, when the key is held and the other nodes' totals
// were never stored in it; otherwise it returns dst unchanged. A key
// reported to OnNewKey may not have counted anything yet: its windows are
// those it is about to count in.
func (ns *Namespace) UnfetchedWindows(now time.Time, key string, dst []Window) []Window {
	if ns.est != nil || !utf8.ValidString(key) {
		return dst
	}
	e := ns.shards.find(ns.shards.hash(key), key)
	if e == nil || e.dead.Load() || e.fetched() {
		return dst
	}
	tn := now.UnixNano()
	for i := range ns.sizes {
		size := ns.sizes[i]
		ws := ratelimit.WindowStart(tn, time.Duration(size))
		s := e.slot(i)
		dst = append(dst,
			Window{Key: e.key, Size: time.Duration(size), Start: ws, e: e, slot: s},
			Window{Key: e.key, Size: time.Duration(size), Start: ws - size, e: e, slot: s})
	}
	return dst
}

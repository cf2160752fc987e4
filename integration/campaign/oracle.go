package campaign

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Mode is a namespace's mode, as sync_rate sets it.
type Mode int

const (
	Local Mode = iota
	Periodic
	Synchronous
)

func (m Mode) String() string { return [...]string{"local", "periodic", "synchronous"}[m] }

// Model is what the oracle knows of the cluster and the load: the
// settings the docs' bounds are stated in.
type Model struct {
	Nodes int
	// Start is the run's start on the wall clock: windows and periods
	// are aligned to the Unix epoch.
	Start time.Time
	// SyncRate is s, a periodic namespace's period; TickTimeout bounds a
	// tick's duration d; CallTimeout bounds a synchronous call; Retry is
	// the background tick of a synchronous namespace.
	SyncRate, TickTimeout, CallTimeout, Retry time.Duration
	// Tick is the longest sync tick the nodes measured (their
	// limiterd_sync_duration_seconds, to its bucket's bound); 0: unknown.
	Tick time.Duration
	// Atomic: the store decides Allow, buckets and leases atomically
	// (Redis, PostgreSQL); false: Cassandra.
	Atomic bool
	// Namespaces by name.
	Namespaces map[string]Mode
	// DecideAlone names the synchronous namespaces whose leases are
	// decided by the node while the store is down (on_store_down: local).
	DecideAlone map[string]bool
	// Window and Limit are the sliding-window Allow's.
	Window time.Duration
	Limit  float64
	// Token bucket: Max tokens, RefillAmount every RefillTime.
	TokenMax, TokenRefill float64
	TokenRefillTime       time.Duration
	// Leaky bucket: Size drops, drained in Interval.
	LeakySize     float64
	LeakyInterval time.Duration
	// Fixed bucket: FixedLimit per FixedPeriod.
	FixedLimit  float64
	FixedPeriod time.Duration
	// LeaseLimit leases of a key at once.
	LeaseLimit int
}

// D is the docs' delay after which the other nodes' counts reach a node:
// 2·max(s, d) + 2·d, d the longest tick (Tick, as the nodes measured it;
// unknown: the tick time-out, which bounds it).
func (m Model) D() time.Duration {
	d := m.Tick
	if d <= 0 || d > m.TickTimeout {
		d = m.TickTimeout
	}
	return 2*max(m.SyncRate, d) + 2*d
}

// tail is how long a fault's effects outlast it: a store presumed down for
// a call time-out after it is back, then two ticks to push and fetch; a
// restarted node blind for one tick.
func (m Model) tail() time.Duration { return m.CallTimeout + m.D() + m.Retry }

// Violation is a guarantee a history broke.
type Violation struct {
	Guarantee string
	Namespace string
	Key       string
	// At is the offset in the run of the window or call concerned.
	At   time.Duration
	What string
	// Ops are the calls that make the case.
	Ops []Op
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s, %s %s at %v: %s", v.Guarantee, v.Namespace, v.Key, v.At, v.What)
	for i, op := range v.Ops {
		if i == 3 {
			s += fmt.Sprintf("; %d more calls", len(v.Ops)-i)
			break
		}
		s += fmt.Sprintf("; %s at node-%d [%v, %v] %s", op.Kind, op.Node, op.Start, op.End, op.Outcome)
	}
	return s
}

// Report is the oracle's judgement of one run.
type Report struct {
	Judged     int // calls judged
	Windows    int // windows judged
	Faulted    int // windows judged by the bound of a store presumed down
	Fallback   int // admissions beyond the limit in those windows, counted apart
	Violations []Violation
}

func (r *Report) violate(v Violation) { r.Violations = append(r.Violations, v) }

// Final is a key's count read after the run, its faults undone and two
// sync periods passed, from node Node.
type Final struct {
	Namespace, Key string
	Count          float64
}

// judge holds one run's history and model while it is judged.
type judge struct {
	m  Model
	h  *History
	rp *Report
	// stalls are the spans in which a node found the store too slow,
	// though no fault was injected (a loaded host): a synchronous call
	// that took call_timeout fell back to the node's own decision, and the
	// node presumed the store down for call_timeout after it.
	stalls []stall
}

type stall struct {
	node int
	span interval
}

// findStalls lists the synchronous calls that took call_timeout.
func (j *judge) findStalls() {
	for _, op := range j.h.Ops {
		if j.m.Namespaces[op.Namespace] == Synchronous && op.Outcome == OK && op.End-op.Start >= j.m.CallTimeout-time.Millisecond {
			j.stalls = append(j.stalls, stall{op.Node, interval{op.Start, op.End + j.m.CallTimeout}})
		}
	}
}

// Judge checks a run's history against every guarantee of the model.
func Judge(m Model, h *History, finals []Final) Report {
	j := &judge{m: m, h: h, rp: &Report{}}
	j.findStalls()
	type nk struct{ ns, key, kind string }
	groups := map[nk][]Op{}
	var order []nk
	for _, op := range h.Ops {
		k := nk{op.Namespace, op.Key, op.Kind}
		if op.Kind == OpRenew || op.Kind == OpRelease {
			k.kind = OpAcquire
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], op)
		j.rp.Judged++
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := order[a], order[b]
		return x.ns+x.key+x.kind < y.ns+y.key+y.kind
	})
	for _, k := range order {
		ops := groups[k]
		mode := m.Namespaces[k.ns]
		switch k.kind {
		case OpAllow:
			j.windows(k.ns, k.key, mode, ops, m.Window, m.Limit, "sliding window")
		case OpFixed:
			j.windows(k.ns, k.key, mode, ops, m.FixedPeriod, m.FixedLimit, "fixed bucket")
		case OpToken:
			j.bucket(k.ns, k.key, mode, ops, m.TokenMax, m.TokenRefill/m.TokenRefillTime.Seconds(), m.TokenRefillTime, "token bucket")
		case OpLeaky:
			j.bucket(k.ns, k.key, mode, ops, m.LeakySize, m.LeakySize/m.LeakyInterval.Seconds(), m.LeakyInterval/time.Duration(max(1, m.LeakySize)), "leaky bucket")
		case OpAcquire:
			j.leases(k.ns, k.key, mode, ops)
		}
	}
	for _, f := range finals {
		j.counts(f, groups[nk{f.Namespace, f.Key, OpIncrement}])
	}
	return *j.rp
}

// interval is a span of the run.
type interval struct{ from, to time.Duration }

func (i interval) overlaps(from, to time.Duration) bool { return i.from < to && from < i.to }

// impaired returns the spans in which node's store calls may fail or
// wait (the store down, the node cut or slowed), each extended by the
// fault's tail; node -1: any node's.
func (j *judge) impaired(node int) []interval {
	var out []interval
	for _, a := range j.h.Faults {
		switch a.Fault.Kind {
		case StoreDown:
		case Cut, Slow:
			if node >= 0 && a.Fault.Node != node {
				continue
			}
		default:
			continue
		}
		out = append(out, interval{a.Began, a.Ended + j.m.tail()})
	}
	for _, st := range j.stalls {
		if node < 0 || st.node == node {
			out = append(out, interval{st.span.from, st.span.to + j.m.tail()})
		}
	}
	return out
}

// disturbed returns the spans of every fault but clock skew, extended by
// the tail: a periodic namespace's bound near the limit holds outside
// them.
func (j *judge) disturbed() []interval {
	var out []interval
	for _, a := range j.h.Faults {
		if a.Fault.Kind == Skew {
			continue
		}
		out = append(out, interval{a.Began, a.Ended + j.m.tail()})
	}
	for _, st := range j.stalls {
		out = append(out, interval{st.span.from, st.span.to + j.m.tail()})
	}
	return out
}

// restarts counts the nodes started again (new incarnations) in [from, to).
func (j *judge) restarts(node int, from, to time.Duration) int {
	n := 0
	for _, a := range j.h.Faults {
		if (a.Fault.Kind == Kill || a.Fault.Kind == Term) && (node < 0 || a.Fault.Node == node) && a.Ended >= from && a.Ended < to {
			n++
		}
	}
	return n
}

// offset is node's clock offset at t.
func (j *judge) offset(node int, t time.Duration) time.Duration {
	for _, a := range j.h.Faults {
		if a.Fault.Kind == Skew && a.Fault.Node == node && a.Began <= t && t < a.Ended {
			return a.Fault.Offset
		}
	}
	return 0
}

// spread is the largest difference between two nodes' clocks in [from, to].
func (j *judge) spread(from, to time.Duration) time.Duration {
	lo, hi := time.Duration(0), time.Duration(0)
	for _, a := range j.h.Faults {
		if a.Fault.Kind == Skew && a.Began <= to && from < a.Ended {
			lo, hi = min(lo, a.Fault.Offset), max(hi, a.Fault.Offset)
		}
	}
	return hi - lo
}

// index is the epoch-aligned period of size that op fell in on its node's
// clock, and whether that is certain (the call's start and end agree).
func (j *judge) index(op Op, size time.Duration) (int64, bool) {
	at := func(t time.Duration) int64 {
		return j.m.Start.Add(t+j.offset(op.Node, t)).UnixNano() / int64(size)
	}
	a, b := at(op.Start), at(op.End)
	return a, a == b
}

// span is period idx of size as a span of the run, widened by the clock
// offsets the nodes may have had.
func (j *judge) span(idx int64, size time.Duration) interval {
	from := time.Unix(0, idx*int64(size)).Sub(j.m.Start)
	w := j.spread(from-size, from+2*size)
	return interval{from - w, from + size + w}
}

func overlapsAny(spans []interval, from, to time.Duration) bool {
	for _, s := range spans {
		if s.overlaps(from, to) {
			return true
		}
	}
	return false
}

// windows judges admissions per window (or fixed period) of one key:
//   - local: each node incarnation admits at most the limit;
//   - synchronous on a store that decides atomically: at most the limit,
//     outside windows in which a node may have presumed the store down;
//     there each node incarnation decides alone, up to the limit (the
//     fallback), and the admissions beyond the limit are counted apart;
//   - periodic (and synchronous on Cassandra): at most L + R·(N−1)/N·D',
//     R the offered load in the window, D' = D + the clocks' spread (D =
//     2·s + d; 2·call_timeout when synchronous), outside windows near a
//     fault; there each node incarnation up to the limit, plus that term.
func (j *judge) windows(ns, key string, mode Mode, ops []Op, size time.Duration, limit float64, what string) {
	type cell struct {
		admitted int
		offered  int
		calls    []Op
	}
	perNode := mode == Local
	cells := map[[2]int64]*cell{}
	for _, op := range ops {
		idx, sure := j.index(op, size)
		node := int64(0)
		if perNode {
			node = int64(op.Node)
		}
		c := cells[[2]int64{idx, node}]
		if c == nil {
			c = &cell{}
			cells[[2]int64{idx, node}] = c
		}
		c.offered++
		if sure && op.Outcome == OK && op.Allowed {
			c.admitted++
			c.calls = append(c.calls, op)
		}
	}
	keys := make([][2]int64, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		return keys[a][0] < keys[b][0] || keys[a][0] == keys[b][0] && keys[a][1] < keys[b][1]
	})
	for _, k := range keys {
		c := cells[k]
		sp := j.span(k[0], size)
		if sp.from < 0 || sp.to > j.lastOp(ops) {
			continue // a window the run covers in part only
		}
		j.rp.Windows++
		rate := float64(c.offered) / size.Seconds()
		spread := j.spread(sp.from, sp.to)
		n := float64(j.m.Nodes)
		var bound float64
		faulted := false
		switch {
		case mode == Local:
			bound = limit * float64(1+j.restarts(int(k[1]), sp.from, sp.to))
		case mode == Synchronous && j.m.Atomic:
			bound = limit
			if overlapsAny(j.impaired(-1), sp.from, sp.to) {
				faulted = true
				bound = limit * (n + float64(j.restarts(-1, sp.from, sp.to)))
			}
		default:
			d := j.m.D()
			if mode == Synchronous {
				d = 2 * j.m.CallTimeout
			}
			term := rate * (n - 1) / n * (d + spread).Seconds()
			bound = limit + term
			if overlapsAny(j.disturbed(), sp.from-d, sp.to) {
				faulted = true
				bound = limit*(n+float64(j.restarts(-1, sp.from, sp.to))) + term
			}
		}
		if faulted {
			j.rp.Faulted++
			j.rp.Fallback += max(0, c.admitted-int(limit))
		}
		if float64(c.admitted) > math.Floor(bound+1e-9) {
			where := ""
			if perNode {
				where = fmt.Sprintf(" on node-%d", k[1])
			}
			j.rp.violate(Violation{
				Guarantee: fmt.Sprintf("%s admissions per window (%s)", what, mode), Namespace: ns, Key: key, At: sp.from,
				What: fmt.Sprintf("%d admitted%s in the window from %v, bound %.1f (limit %g, offered %.0f/s, faulted %v)",
					c.admitted, where, sp.from, bound, limit, rate, faulted),
				Ops: c.calls,
			})
		}
	}
}

// lastOp is the end of the key's last call.
func (j *judge) lastOp(ops []Op) time.Duration {
	var t time.Duration
	for _, op := range ops {
		t = max(t, op.End)
	}
	return t
}

// bucket judges a token or leaky bucket over the run: admitted cost at
// most capacity + what refills over the run (one refill more for a refill
// under way) + R·(N−1)/N·D (periodic; 0 when synchronous on an atomic
// store), plus, for every span in which a node may have decided alone
// (its store presumed down), capacity + what refills in that span, and
// capacity per restarted node.
func (j *judge) bucket(ns, key string, mode Mode, ops []Op, capacity, perSecond float64, step time.Duration, what string) {
	if mode == Local {
		return // one bucket per node; its arithmetic is the engine's, fuzzed apart
	}
	var first, last time.Duration = math.MaxInt64, 0
	admitted := 0
	var calls []Op
	for _, op := range ops {
		first, last = min(first, op.Start), max(last, op.End)
		if op.Outcome == OK && op.Allowed {
			admitted++
			calls = append(calls, op)
		}
	}
	if admitted == 0 {
		return
	}
	span := last - first
	rate := float64(len(ops)) / span.Seconds()
	n := float64(j.m.Nodes)
	bound := capacity + perSecond*(span+step).Seconds()
	if mode == Periodic || !j.m.Atomic {
		d := j.m.D()
		if mode == Synchronous {
			d = 2 * j.m.CallTimeout
		}
		bound += rate * (n - 1) / n * (d + j.spread(first, last)).Seconds()
	}
	spans := j.impaired(-1)
	if mode == Periodic {
		spans = j.disturbed()
	}
	for _, s := range spans {
		alone := min(s.to, last) - max(s.from, first)
		if alone > 0 {
			bound += n * (capacity + perSecond*alone.Seconds())
		}
	}
	bound += capacity * float64(j.restarts(-1, first, last))
	j.rp.Windows++
	if float64(admitted) > math.Floor(bound+1e-9) {
		j.rp.violate(Violation{Guarantee: fmt.Sprintf("%s admissions over the run (%s)", what, mode), Namespace: ns, Key: key, At: first,
			What: fmt.Sprintf("%d admitted over %v, bound %.1f", admitted, span, bound), Ops: calls})
	}
}

// holding is one lease as its client sees it: held from the Acquire's
// answer until the client released it or it expired.
type holding struct {
	lease    string
	node     int
	from, to time.Duration
	acquire  Op
}

// leases judges the leases of one key: at each grant, the leases held at
// once (the new one included) are at most the limit (synchronous; while
// the store is down an Acquire fails unless on_store_down is local), or
// the limit plus those granted at other nodes within D before
// (periodic); near a fault each node incarnation up to the limit. A lease
// is held from its Acquire's answer until its Release was sent, or until
// its expiry: Acquire's (or the last Renew's) start + ttl, less the
// clocks' spread then.
func (j *judge) leases(ns, key string, mode Mode, ops []Op) {
	if mode == Local {
		return
	}
	sort.SliceStable(ops, func(a, b int) bool { return ops[a].Start < ops[b].Start })
	held := map[string]*holding{}
	var all []*holding
	for _, op := range ops {
		switch op.Kind {
		case OpAcquire:
			if op.Outcome == OK && op.Allowed {
				h := &holding{lease: op.Lease, node: op.Node, from: op.End, acquire: op}
				h.to = op.Start + op.TTL - j.spread(op.Start, op.Start+op.TTL)
				held[op.Lease] = h
				all = append(all, h)
			}
		case OpRenew:
			if h := held[op.Lease]; h != nil && op.Outcome == OK && op.Allowed && op.Start < h.to {
				h.to = max(h.to, op.Start+op.TTL-j.spread(op.Start, op.Start+op.TTL))
			}
		case OpRelease:
			if h := held[op.Lease]; h != nil {
				h.to = min(h.to, op.Start)
			}
		}
	}
	n := float64(j.m.Nodes)
	for _, h := range all {
		t := h.from
		var at []*holding
		for _, g := range all {
			if g.from <= t && t < g.to {
				at = append(at, g)
			}
		}
		j.rp.Windows++
		bound := float64(j.m.LeaseLimit)
		if mode == Synchronous && j.m.Atomic && j.m.DecideAlone[ns] && overlapsAny(j.impaired(-1), t-j.m.CallTimeout, t+1) {
			// Each node decides from its own leases: the limit per
			// incarnation.
			bound = float64(j.m.LeaseLimit) * (n + float64(j.restarts(-1, t-j.m.tail(), t+1)))
		}
		if mode == Periodic || !j.m.Atomic {
			d := j.m.D()
			if mode == Synchronous {
				d = 2 * j.m.CallTimeout
			}
			others := 0
			for _, g := range all {
				if g.node != h.node && g.from <= t && t-g.from <= d {
					others++
				}
			}
			bound += float64(others)
			if overlapsAny(j.disturbed(), t-d, t+1) {
				bound = float64(j.m.LeaseLimit)*(n+float64(j.restarts(-1, t-d-j.m.tail(), t+1))) + float64(others)
			}
		}
		if float64(len(at)) > bound {
			var calls []Op
			var names []string
			for _, g := range at {
				calls = append(calls, g.acquire)
				names = append(names, fmt.Sprintf("%s@node-%d [%v, %v)", shortLease(g.lease), g.node, g.from, g.to))
			}
			j.rp.violate(Violation{Guarantee: fmt.Sprintf("leases held at once (%s)", mode), Namespace: ns, Key: key, At: t,
				What: fmt.Sprintf("%d held at %v, bound %.0f: %s", len(at), t, bound, strings.Join(names, ", ")), Ops: calls})
		}
	}
}

func shortLease(s string) string {
	if len(s) > 10 {
		return s[len(s)-10:]
	}
	return s
}

// counts judges a key's Increments against its count read after the run:
//   - no phantom counts: the count is at most the hits acknowledged plus
//     those whose outcome is unknown;
//   - no acknowledged hit lost, but for what a node stopped before
//     pushing it: the count is at least the hits acknowledged less those a
//     killed node (or one stopped while its store was out of reach)
//     acknowledged from its last successful sync (as it reported it
//     just before; or s + d before the kill, or before the span in which
//     its store was out of reach) until it stopped.
func (j *judge) counts(f Final, ops []Op) {
	mode := j.m.Namespaces[f.Namespace]
	if mode == Local || len(ops) == 0 {
		return
	}
	acked, unknown := 0, 0
	for _, op := range ops {
		switch op.Outcome {
		case OK:
			acked++
		case Unknown:
			unknown++
		}
	}
	loss := 0
	period := j.m.SyncRate
	if mode == Synchronous {
		period = j.m.Retry
	}
	for _, a := range j.h.Faults {
		if a.Fault.Kind != Kill && a.Fault.Kind != Term {
			continue
		}
		from := a.Began - period - j.m.TickTimeout
		if last, ok := a.LastSync[f.Namespace]; ok {
			// The node's own word: its last successful sync, which
			// began up to a tick before.
			from = min(from, last-j.m.TickTimeout)
		}
		reach := j.impaired(a.Fault.Node)
		covered := false
		for _, s := range reach {
			if s.from <= a.Began && a.Began < s.to {
				covered = true
				from = min(from, s.from-period-j.m.TickTimeout)
			}
		}
		if last, ok := a.LastSync[f.Namespace]; ok && a.Began-last > period+2*j.m.TickTimeout {
			covered = true // its ticks were failing: its final push may fail too
		}
		if a.Fault.Kind == Term && !covered {
			continue // a graceful stop pushes everything
		}
		// Up to the restart: a stopping node answers calls while it
		// drains, and its final push fails while the store is away.
		for _, op := range ops {
			if op.Node == a.Fault.Node && op.Outcome == OK && op.End >= from && op.Start <= a.Ended {
				loss++
			}
		}
	}
	j.rp.Windows++
	if f.Count > float64(acked+unknown)+1e-9 {
		j.rp.violate(Violation{Guarantee: fmt.Sprintf("no phantom hits (%s)", mode), Namespace: f.Namespace, Key: f.Key,
			What: fmt.Sprintf("count %g after the run, %d acknowledged + %d unknown", f.Count, acked, unknown)})
	}
	if f.Count < float64(acked-loss)-1e-9 {
		j.rp.violate(Violation{Guarantee: fmt.Sprintf("no acknowledged hit lost (%s)", mode), Namespace: f.Namespace, Key: f.Key,
			What: fmt.Sprintf("count %g after the run, %d acknowledged, at most %d lost with killed nodes", f.Count, acked, loss)})
	}
}

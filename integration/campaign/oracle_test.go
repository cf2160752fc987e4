package campaign

import (
	"strings"
	"testing"
	"time"
)

// testModel: windows of 2 s, limit 20, start on a window's boundary.
func testModel(atomic bool) Model {
	return Model{
		Nodes: 3, Start: time.Unix(1_000_000, 0), SyncRate: 100 * time.Millisecond, TickTimeout: 500 * time.Millisecond,
		CallTimeout: 300 * time.Millisecond, Retry: 200 * time.Millisecond, Atomic: atomic, Tick: 100 * time.Millisecond,
		Namespaces:  map[string]Mode{"l": Local, "p": Periodic, "s": Synchronous, "a": Synchronous},
		DecideAlone: map[string]bool{"a": true},
		Window:      2 * time.Second, Limit: 20,
		TokenMax: 10, TokenRefill: 5, TokenRefillTime: time.Second,
		LeakySize: 10, LeakyInterval: 2 * time.Second, FixedLimit: 10, FixedPeriod: 2 * time.Second,
		LeaseLimit: 2,
	}
}

// admits returns n admitted Allows of ns/k at node, evenly over [from,
// from+span), each taking 1 ms, and the whole window's span covered by a
// last refused call so the window is judged.
func admits(kind, ns string, node, n int, from, span time.Duration) []Op {
	var ops []Op
	for i := range n {
		at := from + span*time.Duration(i)/time.Duration(n)
		ops = append(ops, Op{Kind: kind, Namespace: ns, Key: "k", Node: node, Start: at, End: at + time.Millisecond, Outcome: OK, Allowed: true})
	}
	return ops
}

func refusedAt(kind, ns string, at time.Duration) Op {
	return Op{Kind: kind, Namespace: ns, Key: "k", Start: at, End: at + time.Millisecond, Outcome: OK}
}

func history(ops []Op, faults ...Applied) *History {
	return &History{Ops: ops, Faults: faults}
}

func guarantees(r Report) string {
	var s []string
	for _, v := range r.Violations {
		s = append(s, v.Guarantee+": "+v.What)
	}
	return strings.Join(s, "\n")
}

func TestOracleSynchronousWindowExact(t *testing.T) {
	m := testModel(true)
	// Window [2 s, 4 s): 21 admitted of 21 offered; a call at 4.5 s ends
	// the history after it.
	ops := append(admits(OpAllow, "s", 0, 21, 2*time.Second, time.Second), refusedAt(OpAllow, "s", 4500*time.Millisecond))
	r := Judge(m, history(ops), nil)
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0].What, "21 admitted") {
		t.Fatalf("21 admissions under a limit of 20, want one violation; got:\n%s", guarantees(r))
	}
	// The same with the store down in the window: each node alone up to
	// the limit, the one beyond the limit counted apart.
	down := Applied{Fault: Fault{Kind: StoreDown, Node: -1}, Began: 2500 * time.Millisecond, Ended: 3 * time.Second}
	r = Judge(m, history(ops, down), nil)
	if len(r.Violations) != 0 || r.Fallback != 1 || r.Faulted != 1 {
		t.Fatalf("with the store down: violations %q, fallback %d, faulted %d; want none, 1, 1", guarantees(r), r.Fallback, r.Faulted)
	}
	// A call that took call_timeout: the node presumed the store down,
	// though no fault was injected.
	slow := append(append([]Op{}, ops...), Op{Kind: OpAllow, Namespace: "s", Key: "k", Node: 2, Start: 2600 * time.Millisecond, End: 2900 * time.Millisecond, Outcome: OK})
	if r = Judge(m, history(slow), nil); len(r.Violations) != 0 || r.Fallback != 1 {
		t.Fatalf("after a call of call_timeout: violations %q, fallback %d; want none, 1", guarantees(r), r.Fallback)
	}
	// 61 is beyond three nodes alone.
	ops = append(admits(OpAllow, "s", 0, 61, 2*time.Second, time.Second), refusedAt(OpAllow, "s", 4500*time.Millisecond))
	if r = Judge(m, history(ops, down), nil); len(r.Violations) != 1 {
		t.Fatalf("61 admissions with the store down, want a violation; got %q", guarantees(r))
	}
}

// A call whose start and end fall in two windows is in neither.
func TestOracleUncertainWindowNotCounted(t *testing.T) {
	m := testModel(true)
	ops := admits(OpAllow, "s", 0, 20, 2*time.Second, time.Second)
	ops = append(ops, Op{Kind: OpAllow, Namespace: "s", Key: "k", Start: 3999 * time.Millisecond, End: 4001 * time.Millisecond, Outcome: OK, Allowed: true},
		refusedAt(OpAllow, "s", 4500*time.Millisecond))
	if r := Judge(m, history(ops), nil); len(r.Violations) != 0 {
		t.Fatalf("a call across the boundary counted: %s", guarantees(r))
	}
	// A node whose clock is 10 ms ahead puts a call at 3.995 s in the next
	// window: 21 in [2 s, 4 s) by the client's clock, 20 by the node's.
	ops = admits(OpAllow, "s", 1, 21, 2*time.Second, 1995*time.Millisecond)
	ops = append(ops, refusedAt(OpAllow, "s", 4500*time.Millisecond))
	last := &ops[20]
	last.Start, last.End = 3995*time.Millisecond, 3996*time.Millisecond
	skew := Applied{Fault: Fault{Kind: Skew, Node: 1, Offset: 10 * time.Millisecond}, Began: 0, Ended: 5 * time.Second}
	if r := Judge(m, history(ops, skew), nil); len(r.Violations) != 0 {
		t.Fatalf("the node's clock not read: %s", guarantees(r))
	}
}

func TestOracleLocalPerIncarnation(t *testing.T) {
	m := testModel(true)
	var ops []Op
	for node := range 3 {
		ops = append(ops, admits(OpAllow, "l", node, 20, 2*time.Second, time.Second)...)
	}
	ops = append(ops, refusedAt(OpAllow, "l", 4500*time.Millisecond))
	if r := Judge(m, history(ops), nil); len(r.Violations) != 0 {
		t.Fatalf("20 per node: %s", guarantees(r))
	}
	ops = append(ops, admits(OpAllow, "l", 1, 1, 3500*time.Millisecond, time.Millisecond)...)
	r := Judge(m, history(ops), nil)
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0].What, "on node-1") {
		t.Fatalf("21 on node-1: %s", guarantees(r))
	}
	// node-1 killed and started again in the window: a new incarnation,
	// which starts from nothing.
	kill := Applied{Fault: Fault{Kind: Kill, Node: 1}, Began: 3200 * time.Millisecond, Ended: 3400 * time.Millisecond}
	if r := Judge(m, history(ops, kill), nil); len(r.Violations) != 0 {
		t.Fatalf("21 on node-1 over two incarnations: %s", guarantees(r))
	}
}

func TestOraclePeriodicBound(t *testing.T) {
	m := testModel(true)
	// 60 calls offered in the window (30/s): D = 2·0.1 + 2·0.1 = 0.4 s,
	// bound 20 + 30·2/3·0.4 = 28.
	mk := func(admitted int) []Op {
		ops := admits(OpAllow, "p", 0, admitted, 2*time.Second, time.Second)
		for i := range 60 - admitted {
			ops = append(ops, refusedAt(OpAllow, "p", 3*time.Second+time.Duration(i)*10*time.Millisecond))
		}
		return append(ops, refusedAt(OpAllow, "p", 4500*time.Millisecond))
	}
	if r := Judge(m, history(mk(28)), nil); len(r.Violations) != 0 {
		t.Fatalf("28 admitted: %s", guarantees(r))
	}
	if r := Judge(m, history(mk(29)), nil); len(r.Violations) != 1 {
		t.Fatalf("29 admitted, want a violation: %s", guarantees(r))
	}
	// A node cut from the store within D before the window: each node
	// up to the limit alone.
	cut := Applied{Fault: Fault{Kind: Cut, Node: 2}, Began: 1500 * time.Millisecond, Ended: 1600 * time.Millisecond}
	if r := Judge(m, history(mk(29), cut), nil); len(r.Violations) != 0 {
		t.Fatalf("29 admitted near a cut: %s", guarantees(r))
	}
}

func TestOracleLeases(t *testing.T) {
	m := testModel(true)
	acq := func(lease string, node int, at time.Duration) Op {
		return Op{Kind: OpAcquire, Namespace: "s", Key: "k", Node: node, Start: at, End: at + time.Millisecond, Outcome: OK, Allowed: true, Lease: lease, TTL: time.Second}
	}
	rel := func(lease string, at time.Duration) Op {
		return Op{Kind: OpRelease, Namespace: "s", Key: "k", Start: at, End: at + time.Millisecond, Outcome: OK, Allowed: true, Lease: lease}
	}
	two := []Op{acq("a", 0, 0), acq("b", 1, 100*time.Millisecond)}
	if r := Judge(m, history(append(two, acq("c", 2, 500*time.Millisecond))), nil); len(r.Violations) != 1 {
		t.Fatalf("three leases of a limit of 2 at once: %s", guarantees(r))
	}
	if r := Judge(m, history(append(two, rel("a", 400*time.Millisecond), acq("c", 2, 500*time.Millisecond))), nil); len(r.Violations) != 0 {
		t.Fatalf("a released before c: %s", guarantees(r))
	}
	// a expires at 1 s: c at 1.002 s is fine, c at 0.99 s is not.
	if r := Judge(m, history(append(two, acq("c", 2, 1002*time.Millisecond))), nil); len(r.Violations) != 0 {
		t.Fatalf("a expired before c: %s", guarantees(r))
	}
	if r := Judge(m, history(append(two, acq("c", 0, 990*time.Millisecond))), nil); len(r.Violations) != 1 {
		t.Fatalf("c 10 ms before a's expiry: %s", guarantees(r))
	}
	// on_store_down: local, the store down: each node up to the limit.
	down := Applied{Fault: Fault{Kind: StoreDown, Node: -1}, Began: 50 * time.Millisecond, Ended: 600 * time.Millisecond}
	three := []Op{acq("a", 0, 0), acq("b", 1, 100*time.Millisecond), acq("c", 2, 500*time.Millisecond)}
	if r := Judge(m, history(three, down), nil); len(r.Violations) != 1 {
		t.Fatalf("on_store_down refuse, three at once while the store is down: %s", guarantees(r))
	}
	for i := range three {
		three[i].Namespace = "a"
	}
	if r := Judge(m, history(three, down), nil); len(r.Violations) != 0 {
		t.Fatalf("on_store_down local, three at once while the store is down: %s", guarantees(r))
	}
	// A renewal keeps a held.
	renew := Op{Kind: OpRenew, Namespace: "s", Key: "k", Start: 500 * time.Millisecond, End: 501 * time.Millisecond, Outcome: OK, Allowed: true, Lease: "a", TTL: time.Second}
	if r := Judge(m, history(append(two, renew, acq("c", 2, 1050*time.Millisecond))), nil); len(r.Violations) != 1 {
		t.Fatalf("c while a renewed is held: %s", guarantees(r))
	}
	if r := Judge(m, history(append(two, acq("c", 2, 1050*time.Millisecond))), nil); len(r.Violations) != 0 {
		t.Fatalf("c after a expired, b held: %s", guarantees(r))
	}
}

func TestOracleCounts(t *testing.T) {
	m := testModel(true)
	var ops []Op
	for i := range 10 {
		at := time.Duration(i) * 100 * time.Millisecond
		ops = append(ops, Op{Kind: OpIncrement, Namespace: "p", Key: "c", Node: i % 3, Start: at, End: at + time.Millisecond, Outcome: OK})
	}
	ops = append(ops, Op{Kind: OpIncrement, Namespace: "p", Key: "c", Node: 0, Start: 2 * time.Second, End: 4 * time.Second, Outcome: Unknown})
	judge := func(count float64, faults ...Applied) string {
		return guarantees(Judge(m, history(ops, faults...), []Final{{Namespace: "p", Key: "c", Count: count}}))
	}
	for _, c := range []float64{10, 11} {
		if v := judge(c); v != "" {
			t.Errorf("count %g of 10 acknowledged and 1 unknown: %s", c, v)
		}
	}
	if v := judge(12); !strings.Contains(v, "no phantom hits") {
		t.Errorf("count 12: %q", v)
	}
	if v := judge(9); !strings.Contains(v, "no acknowledged hit lost") {
		t.Errorf("count 9: %q", v)
	}
	// node-0 killed at 0.95 s: its hits since 0.95 − s − d = 0.35 s
	// (0.6 s and 0.9 s) may be lost; a graceful stop loses nothing.
	kill := Applied{Fault: Fault{Kind: Kill, Node: 0}, Began: 950 * time.Millisecond, Ended: 2 * time.Second}
	if v := judge(8, kill); v != "" {
		t.Errorf("two hits lost with the killed node: %s", v)
	}
	if v := judge(7, kill); !strings.Contains(v, "lost") {
		t.Errorf("three lost: %q", v)
	}
	// The node said its last successful sync was at 0.2 s: its ticks
	// failed since, and its hits since 0.2 − d = −0.3 s may be lost.
	stale := kill
	stale.LastSync = map[string]time.Duration{"p": 200 * time.Millisecond}
	if v := judge(6, stale); v != "" {
		t.Errorf("four hits lost since the last successful sync: %s", v)
	}
	term := kill
	term.Fault.Kind = Term
	if v := judge(8, term); !strings.Contains(v, "lost") {
		t.Errorf("two lost on a graceful stop: %q", v)
	}
}

func TestOracleTokenBucket(t *testing.T) {
	m := testModel(true)
	// Over 4 s: 10 + 5·(4 + 1) = 35 at most, synchronous on Redis.
	mk := func(n int) []Op {
		ops := admits(OpToken, "s", 0, n, 0, 4*time.Second)
		return append(ops, refusedAt(OpToken, "s", 4*time.Second))
	}
	if r := Judge(m, history(mk(35)), nil); len(r.Violations) != 0 {
		t.Fatalf("35 tokens: %s", guarantees(r))
	}
	if r := Judge(m, history(mk(36)), nil); len(r.Violations) != 1 {
		t.Fatalf("36 tokens: %s", guarantees(r))
	}
}

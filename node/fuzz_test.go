package node_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// fuzzSizes are the window sizes of the fuzzed namespace: sub-second, a
// second, and one that does not divide a minute.
var fuzzSizes = []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Second}

var fuzzKeys = []string{"a", "b", "c|:\x00 é"}

// fuzzUnits scale the numbers read from the input: micro-hits, milli-hits,
// quarter hits, whole hits.
var fuzzUnits = []int64{1, 1_000, 250_000, 1_000_000}

// Op kinds, chosen by an op byte modulo opKinds.
const (
	opIncrement = iota
	opIncrement2
	opAllow
	opAllow2
	opRate
	opAdvance
	opReclaim
	opSync
	opKinds
)

// fuzzInput reads numbers from the fuzz bytes, yielding zeros once they run
// out.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) more() bool { return len(in.b) > 0 }

func (in *fuzzInput) u8() byte {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *fuzzInput) u16() uint16 {
	return uint16(in.u8()) | uint16(in.u8())<<8
}

// FuzzEngine runs sequences of Increment, Allow, Rate, time steps, Reclaim
// and sync exchanges (CollectDirty, MarkPushed, CollectInterest, SetOthers)
// decoded from the fuzz bytes, and checks every answer against refModel, a
// map of window → micro-hit sums with exact arithmetic. Time only moves
// forward.
func FuzzEngine(f *testing.F) {
	seeds := [][]byte{
		{},
		// local: increments in every size, rate, allow.
		{0, 0, 0, opIncrement, 0, 3, 10, 0, 3, opRate, 0, 3, 0, 0, opAllow, 0, 0, 20, 0, 3, 2, 3},
		// synced: increment, advance 1.5 windows, sync, allow until denied.
		{1, 7, 0,
			opIncrement, 1, 1, 5, 0, 3,
			opAdvance, 0xdc, 0x05, 2, // 1500 ms
			opSync, 0xff, 0xff, 1, 7, 0, 3,
			opAllow, 1, 1, 1, 6, 0, 3, 1, 3,
			opAllow, 1, 1, 1, 6, 0, 3, 1, 3,
			opAllow, 1, 1, 1, 6, 0, 3, 1, 3,
			opAllow, 1, 1, 1, 6, 0, 3, 1, 3,
			opReclaim,
			opAdvance, 0x10, 0x27, 2, // 10 s
			opReclaim, opRate, 2, 3, 0, 0},
		// negative and fractional values, count_rejected, many small steps.
		{0, 0x34, 0x12,
			opIncrement, 2, 0, 0xf6, 0xff, 2, // -10 quarters in 100ms
			opIncrement, 2, 3, 0x07, 0x00, 1,
			opAdvance, 50, 0, 2,
			opAllow, 2, 2, 3, 3, 0, 2, 4, 2, 7, 0, 3, 9, 2,
			opAdvance, 99, 0, 2,
			opAllow, 2, 2 | 4, 3, 3, 0, 2, 4, 2, 7, 0, 3, 9, 2,
			opRate, 2, 0, 1, 1},
		// a busy synced history touching all three keys.
		{1, 0, 0x80,
			opRate, 0, 1, 0, 0, opRate, 1, 2, 0, 0,
			opIncrement, 2, 3, 1, 0, 3, opSync, 0x55, 0xaa, 3, 9, 1, 8, 0, 0,
			opAdvance, 0x00, 0x02, 2, opSync, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
			opAdvance, 0x00, 0x40, 2, opReclaim, opSync, 0, 0},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runEngineOps(t, data)
	})
}

func runEngineOps(t *testing.T, data []byte) {
	in := &fuzzInput{b: data}
	cfg := localConfig(fuzzSizes...)
	synced := in.u8()&1 == 1
	if synced {
		cfg = syncedConfig(fuzzSizes...)
	}
	ns := newNS(t, cfg, nil)
	ref := newRefModel(fuzzSizes)
	pushedVer := make(map[refWin]int64)
	version := int64(10)
	now := epoch.Add(time.Duration(in.u16()) * time.Millisecond / 3)

	for op := 0; in.more() && op < 300; op++ {
		tn := now.UnixNano()
		kind := in.u8() % opKinds
		where := fmt.Sprintf("op %d (kind %d, t=%v)", op, kind, now.Sub(epoch))
		switch kind {
		case opIncrement, opIncrement2:
			key := fuzzKeys[int(in.u8())%len(fuzzKeys)]
			idx, size := fuzzSize(in.u8())
			micro := int64(int16(in.u16())) * fuzzUnits[in.u8()%4]
			got, err := ns.IncrementAt(now, key, size, node.FromMicro(micro), nil)
			if err != nil {
				t.Fatalf("%s: IncrementAt(%q, %v, %d µhits): %v", where, key, size, micro, err)
			}
			var want []int64
			for i, s := range ref.sizes {
				if idx < 0 || idx == i {
					ref.add(key, s, tn, micro)
					want = append(want, s)
				}
			}
			checkRates(t, where+" Increment", ref, key, tn, 0, want, got)

		case opRate:
			key := fuzzKeys[int(in.u8())%len(fuzzKeys)]
			idx, size := fuzzSize(in.u8())
			extra := int64(int8(in.u8())) * fuzzUnits[in.u8()%4]
			got, err := ns.RateAt(now, key, size, node.FromMicro(extra), nil)
			if err != nil {
				t.Fatalf("%s: RateAt: %v", where, err)
			}
			var want []int64
			for i, s := range ref.sizes {
				if idx < 0 || idx == i {
					want = append(want, s)
					if synced {
						ref.hold(key, s, floorDiv(tn, s)) // Rate marks the key interesting
					}
				}
			}
			checkRates(t, where+" Rate", ref, key, tn, extra, want, got)

		case opAllow, opAllow2:
			key := fuzzKeys[int(in.u8())%len(fuzzKeys)]
			mask := in.u8() % 8
			if mask == 0 {
				mask = 1
			}
			var lims []ratelimit.Limit
			var rlims []refLimit
			for i, s := range fuzzSizes {
				if mask&(1<<i) != 0 {
					l := int64(in.u16()) * fuzzUnits[in.u8()%4]
					lims = append(lims, ratelimit.Limit{Size: s, Limit: node.FromMicro(l)})
					rlims = append(rlims, refLimit{int64(s), l})
				}
			}
			if in.u8()&1 == 1 { // request order is not size order
				slices.Reverse(lims)
				slices.Reverse(rlims)
			}
			cost := int64(in.u8()) * fuzzUnits[in.u8()%4]
			req := ratelimit.AllowRequest{Key: key, Cost: node.FromMicro(cost), Limits: lims, CountRejected: in.u8()&1 == 1}
			d, err := ns.AllowAt(now, req, nil)
			if err != nil {
				t.Fatalf("%s: AllowAt(%+v): %v", where, req, err)
			}
			checkDecision(t, where, ref, key, tn, cost, rlims, req, d)
			if !d.Allowed && !d.Never {
				checkRetryEdges(t, where, ref, key, tn, cost, rlims, d)
			}

		case opAdvance:
			scale := []time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond, 100 * time.Millisecond}[in.u8()%4]
			now = now.Add(time.Duration(in.u16()) * scale)

		case opReclaim:
			ns.Reclaim(now)
			want := 0
			for _, key := range fuzzKeys {
				for _, s := range ref.sizes {
					if l, ok := ref.latest[refSlot{key, s}]; ok && l >= floorDiv(tn, s)-s {
						want++
						break
					}
				}
			}
			if got := ns.ActiveKeys(); got != int64(want) {
				t.Fatalf("%s: ActiveKeys after Reclaim = %d, want %d", where, got, want)
			}

		case opSync:
			// Push: every window that still counts and whose own total
			// differs from its last pushed one.
			dirty := ns.CollectDirty(now, nil)
			slices.SortFunc(dirty, func(a, b node.Pending) int {
				return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Size, b.Size), cmp.Compare(a.Start, b.Start))
			})
			var wantDirty []string
			for _, w := range ref.interest(tn) {
				if own := ref.own[w]; own != ref.pushed[w] {
					wantDirty = append(wantDirty, fmt.Sprintf("%s/%v/%d=%d", w.key, time.Duration(w.size), w.start, own))
				}
			}
			var gotDirty []string
			for _, p := range dirty {
				gotDirty = append(gotDirty, fmt.Sprintf("%s/%v/%d=%d", p.Key, p.Size, p.Start, p.Total))
			}
			slices.Sort(wantDirty)
			if !slices.Equal(gotDirty, wantDirty) {
				t.Fatalf("%s: CollectDirty = %v, want %v", where, gotDirty, wantDirty)
			}
			for _, p := range dirty {
				b := in.u8()
				if b&1 == 0 {
					continue // this push failed
				}
				v := version
				if b&2 != 0 {
					v -= 5 // a late push, older than some already applied
				}
				version++
				ns.MarkPushed(p, v)
				w := refWin{p.Key, int64(p.Size), p.Start}
				if v > pushedVer[w] {
					pushedVer[w] = v
					ref.pushed[w] = p.Total
				}
			}
			// Fetch: the current and previous window of every key touched in
			// either, given the other nodes' totals.
			interest := ns.CollectInterest(now, nil)
			var gotInterest, wantInterest []string
			for _, w := range interest {
				gotInterest = append(gotInterest, fmt.Sprintf("%s/%v/%d", w.Key, w.Size, w.Start))
			}
			for _, w := range ref.interest(tn) {
				wantInterest = append(wantInterest, fmt.Sprintf("%s/%v/%d", w.key, time.Duration(w.size), w.start))
			}
			slices.Sort(gotInterest)
			slices.Sort(wantInterest)
			if !slices.Equal(gotInterest, wantInterest) {
				t.Fatalf("%s: CollectInterest = %v, want %v", where, gotInterest, wantInterest)
			}
			slices.SortFunc(interest, func(a, b node.Window) int {
				return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Size, b.Size), cmp.Compare(a.Start, b.Start))
			})
			for _, w := range interest {
				others := int64(int8(in.u8())) * fuzzUnits[in.u8()%4]
				ns.SetOthers(w, others)
				rw := refWin{w.Key, int64(w.Size), w.Start}
				ref.others[rw] = others
				if others != 0 {
					ref.hold(w.Key, int64(w.Size), w.Start)
				}
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// fuzzSize maps a byte to a slot index and size; -1 and 0 mean every size.
func fuzzSize(b byte) (int, time.Duration) {
	i := int(b) % (len(fuzzSizes) + 1)
	if i == len(fuzzSizes) {
		return -1, 0
	}
	return i, fuzzSizes[i]
}

// interest returns the windows that still count at tn (the current and the
// previous one) of every (key, size) holding a bucket in either.
func (m *refModel) interest(tn int64) []refWin {
	var out []refWin
	for s, l := range m.latest {
		ws := floorDiv(tn, s.size)
		if l >= ws-s.size {
			out = append(out, refWin{s.key, s.size, ws}, refWin{s.key, s.size, ws - s.size})
		}
	}
	return out
}

// checkRates compares rates returned by the engine with the reference's
// exact ones, for the sizes in want (ascending).
func checkRates(t *testing.T, where string, ref *refModel, key string, tn, extra int64, want []int64, got []ratelimit.Rate) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rates %v, want %d", where, len(got), got, len(want))
	}
	for i, s := range want {
		if got[i].Size != time.Duration(s) {
			t.Errorf("%s: rate %d has size %v, want %v", where, i, got[i].Size, time.Duration(s))
		}
		exact := ref.rate(key, s, tn, extra)
		ws := floorDiv(tn, s)
		tol := tolerance(ref.count(key, s, ws), ref.count(key, s, ws-s), extra) / ratelimit.Micro
		diff := new(big.Rat).Sub(new(big.Rat).SetFloat64(got[i].Rate), exact.Quo(exact, big.NewRat(ratelimit.Micro, 1)))
		if d := ratFloat(diff); d > tol || d < -tol {
			t.Errorf("%s: %q rate of %v = %v, want %v (off by %g)", where, key, time.Duration(s), got[i].Rate, ratFloat(exact), d)
		}
	}
}

// checkRetryEdges checks that a denial's RetryAfter d is admitted by the
// reference at t+d and not at t+d−1µs.
func checkRetryEdges(t *testing.T, where string, ref *refModel, key string, tn, cost int64, rlims []refLimit, d ratelimit.Decision) {
	t.Helper()
	ra := int64(d.RetryAfter)
	tol := ref.decisionTol(key, rlims, cost, tn)
	if t2 := ref.decisionTol(key, rlims, cost, tn+ra); t2.Cmp(tol) > 0 {
		tol = t2
	}
	if ra <= 0 {
		t.Errorf("%s: denied with RetryAfter %v, want > 0", where, d.RetryAfter)
		return
	}
	if m := ref.margin(key, rlims, cost, tn+ra); m.Cmp(new(big.Rat).Neg(tol)) < 0 {
		t.Errorf("%s: RetryAfter %v: the reference does not admit cost %d then (margin %v µhits)", where, d.RetryAfter, cost, ratFloat(m))
	}
	if ra >= int64(time.Microsecond) {
		if m := ref.margin(key, rlims, cost, tn+ra-int64(time.Microsecond)); m.Cmp(tol) > 0 {
			t.Errorf("%s: RetryAfter %v is not the least: the reference admits cost %d 1µs earlier (margin %v µhits)", where, d.RetryAfter, cost, ratFloat(m))
		}
	}
}

// TestEngineOpsRandom runs runEngineOps over pseudo-random inputs, so the
// model check covers more than the seed corpus without -fuzz.
func TestEngineOpsRandom(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 30
	}
	var buf [8]byte
	for i := range n {
		data := make([]byte, 0, 600)
		x := uint64(i)*0x9e3779b97f4a7c15 + 1
		for len(data) < cap(data) {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(buf[:], x)
			data = append(data, buf[:]...)
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { runEngineOps(t, data) })
	}
}

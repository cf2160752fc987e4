package ratelimit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// tokens10 is a token bucket of 10 tokens refilled one every 100 ms.
var tokens10 = BucketSpec{Kind: TokenLimit, A: 10 * Micro, B: int64(100 * time.Millisecond), C: Micro}

func at(ms int64) int64 { return ms * int64(time.Millisecond) }

// A take made before a refill the cap cut off, reaching the bucket after
// a later take, gets that refill back: the bucket ends as the takes
// applied in time order leave it.
func TestForceLateTakeGetsWasteBack(t *testing.T) {
	s := tokens10.Init(at(15_700))
	tokens10.Force(&s, at(15_864), Micro) // after the refill at 15.8 s, which the cap cut off
	if want := (BucketState{Level: 9 * Micro, Mark: at(15_800), Waste: Micro}); s != want {
		t.Fatalf("after the take at 15.864 s: %+v, want %+v", s, want)
	}
	tokens10.Force(&s, at(15_790), Micro) // made before it: the refill would have fitted
	tokens10.Force(&s, at(15_790), Micro) // the second one would not have
	// In time order: 10 − 2 at 15.79 s, + 1 at 15.8 s, − 1 at 15.864 s.
	if s.Level != 8*Micro {
		t.Fatalf("level %d, want %d, as the takes applied in time order", s.Level, 8*Micro)
	}
}

// A take made before a refill the cap cut off, decided after later takes
// drained the bucket, is admitted as it would have been in time order,
// and leaves the bucket where they leave it.
func TestTakeLateGetsWasteBack(t *testing.T) {
	s := tokens10.Init(at(15_700))
	for range 10 {
		if !tokens10.Take(&s, true, at(15_864), Micro, false).Allowed {
			t.Fatal("a take of 1 of 10 refused")
		}
	}
	st := tokens10.Take(&s, true, at(15_790), Micro, false)
	// In time order: 10 − 1 at 15.79 s, + 1 at 15.8 s, − 10.
	if !st.Allowed || s.Level != 0 || st.Used != Micro {
		t.Fatalf("the take made at 15.79 s: allowed %v, used %d, level %d; want true, %d, 0", st.Allowed, st.Used, s.Level, Micro)
	}
	if tokens10.Take(&s, true, at(15_790), Micro, false).Allowed {
		t.Fatal("a second take made at 15.79 s admitted: the refill had room for one")
	}
}

// What the cap cut off of the last refill: all of it for a bucket full
// before it, the excess for one it filled, nothing for one it did not.
func TestAdvanceWaste(t *testing.T) {
	for _, c := range []struct {
		name string
		from BucketState
		to   int64
		want BucketState
	}{
		{"full before", BucketState{Level: 10 * Micro, Mark: at(1_000)}, at(1_250), BucketState{Level: 10 * Micro, Mark: at(1_200), Waste: Micro}},
		{"filled before the last", BucketState{Level: 9 * Micro, Mark: at(1_000)}, at(1_250), BucketState{Level: 10 * Micro, Mark: at(1_200), Waste: Micro}},
		{"filled by the last, exactly", BucketState{Level: 8 * Micro, Mark: at(1_000)}, at(1_250), BucketState{Level: 10 * Micro, Mark: at(1_200), Waste: 0}},
		{"filled by the last, in part", BucketState{Level: 8*Micro + 1, Mark: at(1_000)}, at(1_250), BucketState{Level: 10 * Micro, Mark: at(1_200), Waste: 1}},
		{"not filled", BucketState{Level: 5 * Micro, Mark: at(1_000)}, at(1_250), BucketState{Level: 7 * Micro, Mark: at(1_200), Waste: 0}},
		{"no refill: unchanged", BucketState{Level: 5 * Micro, Mark: at(1_000), Waste: 7}, at(1_050), BucketState{Level: 5 * Micro, Mark: at(1_000), Waste: 7}},
	} {
		s := c.from
		tokens10.Force(&s, c.to, 0)
		if s != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, s, c.want)
		}
	}
}

// Takes reaching a token bucket out of order, each at most lag after it
// was made, leave it never above the bucket they leave in time order;
// when no take is as late as a refill time and none is decided in the
// store, exactly at it. Mixed: takes decided in the store too, and lumps
// of takes admitted elsewhere, each applied as of its first take.
func TestOutOfOrderNeverAboveInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, mixed := range []bool{false, true} {
		for round := range 10000 {
			lag := at(1 + r.Int64N(400))
			store, exact := outOfOrder(r, lag, mixed)
			if store.Level > exact.Level {
				t.Fatalf("mixed %v, round %d (lag %v): out of order %d, above in order %d", mixed, round, time.Duration(lag), store.Level, exact.Level)
			}
			if !mixed && lag < tokens10.B && store.Level != exact.Level {
				t.Fatalf("round %d (lag %v, under a refill time): out of order %d, in order %d", round, time.Duration(lag), store.Level, exact.Level)
			}
		}
	}
}

// outOfOrder makes takes of tokens10, each reaching the store up to lag
// after it was made: with mixed, half are decided in the store when they
// reach it (admitted or not), the others lumps of takes admitted
// elsewhere, applied as of their first take; without, single takes
// admitted elsewhere. It returns the store's bucket and the one the
// admitted takes leave in time order, both at the time the last arrived.
func outOfOrder(r *rand.Rand, lag int64, mixed bool) (store, exact BucketState) {
	type take struct{ at, n int64 }
	type arrival struct {
		at      int64 // when it reaches the store
		decided bool
		takes   []take // one for a decided take; a lump's, oldest first
	}
	var arrivals []arrival
	now := at(10_000)
	for range 1 + r.IntN(30) {
		now += at(r.Int64N(80))
		a := arrival{at: now + r.Int64N(lag), decided: mixed && r.IntN(2) == 0}
		a.takes = append(a.takes, take{now, Micro * (1 + r.Int64N(2))})
		for k := now; mixed && !a.decided && r.IntN(2) == 0; {
			k += at(1 + r.Int64N(60))
			if k > a.at {
				break
			}
			a.takes = append(a.takes, take{k, Micro})
		}
		arrivals = append(arrivals, a)
	}
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	store = tokens10.Init(at(9_000))
	var admitted []take
	for _, a := range arrivals {
		if a.decided {
			if tokens10.Take(&store, true, a.takes[0].at, a.takes[0].n, false).Allowed {
				admitted = append(admitted, a.takes[0])
			}
			continue
		}
		var sum int64
		for _, k := range a.takes {
			sum += k.n
			admitted = append(admitted, k)
		}
		tokens10.Force(&store, a.takes[0].at, sum)
	}
	slices.SortStableFunc(admitted, func(a, b take) int { return int(a.at - b.at) })
	exact = tokens10.Init(at(9_000))
	for _, k := range admitted {
		tokens10.Force(&exact, k.at, k.n)
	}
	end := max(arrivals[len(arrivals)-1].at, now)
	tokens10.Force(&store, end, 0)
	tokens10.Force(&exact, end, 0)
	return store, exact
}

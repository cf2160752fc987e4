package campaign

import (
	"reflect"
	"testing"
	"time"
)

func testParams() Params {
	return Params{Nodes: 3, Duration: 20 * time.Second, MaxSkew: 50 * time.Millisecond, MaxSlow: 100 * time.Millisecond}
}

// A seed replays its schedule: the same faults at the same offsets.
func TestGenerateReplaysASeed(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		a, b := Generate(seed, testParams()), Generate(seed, testParams())
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d gave two schedules:\n%s\n%s", seed, a, b)
		}
	}
	if reflect.DeepEqual(Generate(1, testParams()).Faults, Generate(2, testParams()).Faults) {
		t.Error("seeds 1 and 2 gave the same faults")
	}
}

// Every schedule has at least three faults at one instant, each inside the
// run with 3 s to spare, no two on one target at once, and draws every
// kind of fault over a few seeds.
func TestGenerateOverlapsFaults(t *testing.T) {
	p := testParams()
	kinds := map[FaultKind]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		s := Generate(seed, p)
		if s.MaxOverlap() < 3 {
			t.Errorf("seed %d: at most %d faults at once:\n%s", seed, s.MaxOverlap(), s)
		}
		for i, f := range s.Faults {
			kinds[f.Kind]++
			if f.At < time.Second || f.End() > p.Duration-3*time.Second || f.For < 200*time.Millisecond {
				t.Errorf("seed %d: %s outside the run's middle", seed, f)
			}
			if (f.Kind == StoreDown) != (f.Node < 0) || f.Node >= p.Nodes {
				t.Errorf("seed %d: %s strikes node %d", seed, f, f.Node)
			}
			if f.Kind == Skew && (f.Offset < -p.MaxSkew || f.Offset > p.MaxSkew) || f.Kind == Slow && (f.Delay <= 0 || f.Delay > p.MaxSlow) {
				t.Errorf("seed %d: %s beyond its bound", seed, f)
			}
			for _, g := range s.Faults[i+1:] {
				if target(f) == target(g) && f.At < g.End() && g.At < f.End() {
					t.Errorf("seed %d: %s and %s on one target at once", seed, f, g)
				}
			}
		}
	}
	for _, k := range allKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s fault in 200 schedules", k)
		}
	}
}

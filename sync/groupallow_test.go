package sync_test

import (
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestDecideGroup: group decisions with answers computed by hand. The
// group is decided at 15 s into a minute: a window of 1 s is at its start
// (its previous window weighs 1), the minute's previous window weighs
// (60 − 15) / 60 = 0.75. Totals and limits are in hits.
func TestDecideGroup(t *testing.T) {
	const hit = ratelimit.Micro
	minute := start.Truncate(time.Minute)
	at := minute.Add(15 * time.Second).UnixNano()
	window := func(size time.Duration, cur, prev int64) clustersync.GroupWindow {
		s := ratelimit.WindowStart(at, size)
		return clustersync.GroupWindow{Size: size,
			Cur:  clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "api", Size: size, Start: s, Key: "k"}, Total: cur * hit},
			Prev: clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "api", Size: size, Start: s - int64(size)}, Total: prev * hit}}
	}
	type entry struct {
		cost          int64
		countRejected bool
		limits        map[int]int64 // window → limit
	}
	tests := []struct {
		name    string
		windows []clustersync.GroupWindow
		others  [][2]int64 // hits: current, previous
		entries []entry
		allowed []bool
		cur     []int64 // hits
	}{
		{
			// Rate 2 own + 3 others = 5: the first hit reaches the limit
			// of 6, the second passes it.
			name:    "others counted once",
			windows: []clustersync.GroupWindow{window(time.Second, 2, 0)},
			others:  [][2]int64{{3, 0}},
			entries: []entry{{1, false, map[int]int64{0: 6}}, {1, false, map[int]int64{0: 6}}},
			allowed: []bool{true, false},
			cur:     []int64{3},
		},
		{
			// Rate (1 + 1) + (4 + 4) × 0.75 = 8 under a limit of 10:
			// 1 fits (9), 2 more do not (11), 1 more does (10).
			name:    "the previous window weighed",
			windows: []clustersync.GroupWindow{window(time.Minute, 1, 4)},
			others:  [][2]int64{{1, 4}},
			entries: []entry{{1, false, map[int]int64{0: 10}}, {2, false, map[int]int64{0: 10}}, {1, false, map[int]int64{0: 10}}},
			allowed: []bool{true, false, true},
			cur:     []int64{3},
		},
		{
			// At the 1 s window's start its previous window weighs 1:
			// (0 + 1) + (2 + 3) = 6, limit 7.
			name:    "the previous window whole at a window's start",
			windows: []clustersync.GroupWindow{window(time.Second, 0, 2)},
			others:  [][2]int64{{1, 3}},
			entries: []entry{{1, false, map[int]int64{0: 7}}, {1, false, map[int]int64{0: 7}}},
			allowed: []bool{true, false},
			cur:     []int64{1},
		},
		{
			// 1 s: (1 + 1) under 5; minute: (4 + 4) under 10. The third
			// hit fits the 1 s limit (5) but not the minute's (11).
			name:    "every limit binds",
			windows: []clustersync.GroupWindow{window(time.Second, 1, 0), window(time.Minute, 4, 0)},
			others:  [][2]int64{{1, 0}, {4, 0}},
			entries: []entry{{1, false, map[int]int64{0: 5, 1: 10}}, {1, false, map[int]int64{0: 5, 1: 10}}, {1, false, map[int]int64{0: 5, 1: 10}}},
			allowed: []bool{true, true, false},
			cur:     []int64{3, 6},
		},
		{
			// An entry limited in the 1 s window only counts in the
			// minute too, and so fills the minute for the next entry.
			name:    "an admitted cost counts in every window",
			windows: []clustersync.GroupWindow{window(time.Second, 0, 0), window(time.Minute, 0, 0)},
			others:  [][2]int64{{0, 0}, {3, 0}},
			entries: []entry{{2, false, map[int]int64{0: 100}}, {1, false, map[int]int64{1: 5}}, {1, false, map[int]int64{1: 5}}},
			allowed: []bool{true, false, false},
			cur:     []int64{2, 2},
		},
		{
			// A refused cost of 3 counted anyway leaves no room for 1.
			name:    "count rejected",
			windows: []clustersync.GroupWindow{window(time.Second, 0, 0)},
			others:  [][2]int64{{1, 0}},
			entries: []entry{{3, true, map[int]int64{0: 3}}, {1, false, map[int]int64{0: 3}}, {1, true, map[int]int64{0: 3}}},
			allowed: []bool{false, false, false},
			cur:     []int64{4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &clustersync.GroupAllowRequest{Inc: "a", At: at, Windows: tt.windows}
			for _, e := range tt.entries {
				ge := clustersync.GroupEntry{Cost: e.cost * hit, CountRejected: e.countRejected}
				for w := range tt.windows {
					if l, ok := e.limits[w]; ok {
						ge.Limits = append(ge.Limits, clustersync.GroupLimit{Window: w, Limit: l * hit})
					}
				}
				req.Entries = append(req.Entries, ge)
			}
			others := make([][2]int64, len(tt.others))
			for w, o := range tt.others {
				others[w] = [2]int64{o[0] * hit, o[1] * hit}
			}
			allowed := make([]bool, len(req.Entries))
			cur := make([]int64, len(req.Windows))
			clustersync.DecideGroup(req, others, allowed, cur)
			if !slices.Equal(allowed, tt.allowed) {
				t.Errorf("allowed = %v, want %v", allowed, tt.allowed)
			}
			for w := range cur {
				cur[w] /= hit
			}
			if !slices.Equal(cur, tt.cur) {
				t.Errorf("own current totals = %v hits, want %v", cur, tt.cur)
			}
		})
	}
}

package strategytest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The subtests of clustersync.GroupAllower: every answer and every write
// is compared with clustersync.DecideGroup, the reference.

// groupWindow is window size of k at at, with this incarnation's own
// totals cur and prev sent with version v.
func (e *env) groupWindow(k clustersync.WindowKey, size time.Duration, cur, prev, at, v int64) clustersync.GroupWindow {
	l := e.allowLimit(k, size, 0, cur, prev, at, v)
	return clustersync.GroupWindow{Size: size, Cur: l.Cur, Prev: l.Prev}
}

// allowGroup calls AllowGroup and checks what it returns and what it
// writes against the reference: others are the other incarnations'
// totals of each window as the test stored them.
func (e *env) allowGroup(t *testing.T, ga clustersync.GroupAllower, req *clustersync.GroupAllowRequest, others [][2]int64) []bool {
	t.Helper()
	wantAllowed := make([]bool, len(req.Entries))
	wantCur := make([]int64, len(req.Windows))
	clustersync.DecideGroup(req, others, wantAllowed, wantCur)
	allowed := make([]bool, len(req.Entries))
	got := make([][2]int64, len(req.Windows))
	for i := range got {
		got[i] = [2]int64{unset, unset}
	}
	if err := ga.AllowGroup(ctx(t, callTimeout), req, allowed, got); err != nil {
		t.Fatalf("AllowGroup: %v", err)
	}
	for i := range allowed {
		if allowed[i] != wantAllowed[i] {
			t.Errorf("entry %d (cost %d, limits %v): allowed %v, want %v (reference)", i, req.Entries[i].Cost, req.Entries[i].Limits, allowed[i], wantAllowed[i])
		}
	}
	for w := range got {
		if got[w] != others[w] {
			t.Errorf("window %d (%s): others %v, want %v", w, req.Windows[w].Size, got[w], others[w])
		}
		e.wantWindow(t, req.Windows[w].Cur.WindowKey, wantCur[w]+others[w][0])
		e.wantWindow(t, req.Windows[w].Prev.WindowKey, req.Windows[w].Prev.Total+others[w][1])
	}
	return allowed
}

func testGroupAllow(t *testing.T, e *env) {
	ga := as[clustersync.GroupAllower](t, e)
	const hit = 1_000_000
	at := e.minute + int64(45*time.Second)

	t.Run("entries in order", func(t *testing.T) {
		// Limit 5 hits, others 1, own 1: of 6 entries of 1 hit, 3 fit.
		a, b := e.inc("a"), e.inc("b")
		k := e.key("in-order")
		w := e.groupWindow(k, time.Minute, hit, 0, at, e.next())
		e.push(t, b, e.row(w.Cur.WindowKey, hit))
		req := &clustersync.GroupAllowRequest{Inc: a, At: at, Windows: []clustersync.GroupWindow{w}}
		for range 6 {
			req.Entries = append(req.Entries, clustersync.GroupEntry{Cost: hit, Limits: []clustersync.GroupLimit{{Window: 0, Limit: 5 * hit}}})
		}
		got := e.allowGroup(t, ga, req, [][2]int64{{hit, 0}})
		if want := []bool{true, true, true, false, false, false}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("allowed %v, want %v", got, want)
		}
		e.wantWindow(t, w.Cur.WindowKey, 5*hit)
	})

	t.Run("count rejected and larger costs", func(t *testing.T) {
		// Limit 10: 4 fits, 7 does not (counted anyway), then 1 no
		// longer fits, and a cost of 0 reads.
		a := e.inc("a")
		k := e.key("count-rejected")
		w := e.groupWindow(k, time.Minute, 0, 0, at, e.next())
		lim := []clustersync.GroupLimit{{Window: 0, Limit: 10 * hit}}
		req := &clustersync.GroupAllowRequest{Inc: a, At: at, Windows: []clustersync.GroupWindow{w}, Entries: []clustersync.GroupEntry{
			{Cost: 4 * hit, Limits: lim},
			{Cost: 7 * hit, CountRejected: true, Limits: lim},
			{Cost: hit, Limits: lim},
			{Cost: 0, Limits: lim},
		}}
		got := e.allowGroup(t, ga, req, [][2]int64{{0, 0}})
		if want := []bool{true, false, false, false}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("allowed %v, want %v", got, want)
		}
	})

	t.Run("windows and previous windows", func(t *testing.T) {
		// Two sizes; entries check one, the other or both, and every
		// counted cost goes into both current windows.
		a, b, c := e.inc("a"), e.inc("b"), e.inc("c")
		k := e.key("windows")
		wm := e.groupWindow(k, time.Minute, 2*hit, 3*hit, at, e.next())
		wh := e.groupWindow(k, time.Hour, 9*hit, 4*hit, at, e.next())
		e.push(t, b, e.row(wm.Cur.WindowKey, hit), e.row(wm.Prev.WindowKey, 5*hit), e.row(wh.Cur.WindowKey, 7*hit))
		e.push(t, c, e.row(wh.Prev.WindowKey, 11*hit), e.row(wm.Prev.WindowKey, 2*hit))
		others := [][2]int64{{hit, 7 * hit}, {7 * hit, 11 * hit}}
		m := func(l int64) clustersync.GroupLimit { return clustersync.GroupLimit{Window: 0, Limit: l} }
		h := func(l int64) clustersync.GroupLimit { return clustersync.GroupLimit{Window: 1, Limit: l} }
		req := &clustersync.GroupAllowRequest{Inc: a, At: at, Windows: []clustersync.GroupWindow{wm, wh}, Entries: []clustersync.GroupEntry{
			{Cost: hit, Limits: []clustersync.GroupLimit{m(7 * hit)}},
			{Cost: hit, Limits: []clustersync.GroupLimit{h(30 * hit)}},
			{Cost: hit, Limits: []clustersync.GroupLimit{m(100 * hit), h(19 * hit)}},
			{Cost: 2 * hit, Limits: []clustersync.GroupLimit{m(9 * hit), h(100 * hit)}},
			{Cost: hit, Limits: nil},
			{Cost: hit, Limits: []clustersync.GroupLimit{h(30 * hit), m(7 * hit)}},
		}}
		e.allowGroup(t, ga, req, others)
	})

	t.Run("versions checked", func(t *testing.T) {
		// A group sent with older versions than the rows stored decides
		// on the totals sent but writes nothing over the newer rows.
		a := e.inc("a")
		k := e.key("versions")
		v := e.next()
		newer := e.groupWindow(k, time.Minute, 3*hit, hit, at, e.next())
		e.push(t, a, newer.Cur, newer.Prev)
		old := e.groupWindow(k, time.Minute, 0, 0, at, v)
		req := &clustersync.GroupAllowRequest{Inc: a, At: at, Windows: []clustersync.GroupWindow{old},
			Entries: []clustersync.GroupEntry{{Cost: hit, Limits: []clustersync.GroupLimit{{Window: 0, Limit: 10 * hit}}}}}
		allowed := make([]bool, 1)
		others := make([][2]int64, 1)
		if err := ga.AllowGroup(ctx(t, callTimeout), req, allowed, others); err != nil {
			t.Fatal(err)
		}
		if !allowed[0] {
			t.Errorf("allowed %v, want true", allowed[0])
		}
		e.wantWindow(t, old.Cur.WindowKey, 3*hit)
		e.wantWindow(t, old.Prev.WindowKey, hit)
	})

	t.Run("random groups match the reference", func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, uint64(e.minute)))
		a, b := e.inc("a"), e.inc("b")
		for round := range 20 {
			k := e.key(fmt.Sprintf("random-%d", round))
			at := e.minute + r.Int64N(int64(time.Minute))
			sizes := []time.Duration{time.Minute, time.Hour}[:1+r.IntN(2)]
			req := &clustersync.GroupAllowRequest{Inc: a, At: at}
			others := make([][2]int64, len(sizes))
			for i, size := range sizes {
				w := e.groupWindow(k, size, r.Int64N(20*hit), r.Int64N(20*hit), at, e.next())
				others[i] = [2]int64{r.Int64N(20 * hit), r.Int64N(20 * hit)}
				e.push(t, b, e.row(w.Cur.WindowKey, others[i][0]), e.row(w.Prev.WindowKey, others[i][1]))
				req.Windows = append(req.Windows, w)
			}
			for range 1 + r.IntN(12) {
				en := clustersync.GroupEntry{Cost: r.Int64N(3 * hit), CountRejected: r.IntN(4) == 0}
				for i := range sizes {
					if r.IntN(3) > 0 {
						en.Limits = append(en.Limits, clustersync.GroupLimit{Window: i, Limit: r.Int64N(60 * hit)})
					}
				}
				req.Entries = append(req.Entries, en)
			}
			e.allowGroup(t, ga, req, others)
		}
	})

	t.Run("exact under concurrency", func(t *testing.T) {
		// Incarnations send groups of 1 to 8 entries at once; each
		// serialises its own groups (as the contract requires) and keeps
		// its exact own total. Exactly the limit is admitted.
		const (
			limit   = 100 * hit
			incs    = 6
			entries = 60 // per incarnation: 360 for 100 admissions
		)
		k := e.key("exact")
		var admitted atomic.Int64
		owns := make([]int64, incs)
		c := ctx(t, 5*time.Minute)
		var wg sync.WaitGroup
		for i := range incs {
			wg.Go(func() {
				inc := e.inc(fmt.Sprintf("n%d", i))
				r := rand.New(rand.NewPCG(uint64(i), 1))
				for sent := 0; sent < entries; {
					n := min(1+r.IntN(8), entries-sent)
					sent += n
					req := &clustersync.GroupAllowRequest{Inc: inc, At: at,
						Windows: []clustersync.GroupWindow{e.groupWindow(k, time.Minute, owns[i], 0, at, e.next())}}
					for range n {
						req.Entries = append(req.Entries, clustersync.GroupEntry{Cost: hit, Limits: []clustersync.GroupLimit{{Window: 0, Limit: limit}}})
					}
					allowed := make([]bool, n)
					if err := ga.AllowGroup(c, req, allowed, make([][2]int64, 1)); err != nil {
						t.Errorf("incarnation %d: AllowGroup: %v", i, err)
						return
					}
					for _, ok := range allowed {
						if ok {
							owns[i] += hit
							admitted.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != limit/hit {
			t.Errorf("admitted %d of %d entries, want exactly %d", got, incs*entries, limit/hit)
		}
		e.wantWindow(t, windowKey(k, time.Minute, ratelimit.WindowStart(at, time.Minute)), limit)
	})
}

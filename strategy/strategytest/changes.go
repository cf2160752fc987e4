package strategytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// ChangeTrimmer is the test hook of a ChangeReader's trimming: it makes
// the store forget namespace's change log as its trimming by age would
// after a reader's long absence, so that every cursor issued before reads
// as lost. A store's test may wrap the store to provide it; the subtest
// that needs it is skipped without it.
type ChangeTrimmer interface {
	TrimChanges(ctx context.Context, namespace string) error
}

// changeView is what a reader learned from a ChangeReader: the others'
// sum per window, from its reads applied in order.
type changeView struct {
	cr     clustersync.ChangeReader
	inc    string
	ns     string
	cursor clustersync.Cursor
	seen   map[clustersync.WindowKey]int64
}

func (e *env) changeView(t *testing.T, inc string) *changeView {
	t.Helper()
	v := &changeView{cr: as[clustersync.ChangeReader](t, e), inc: inc, ns: e.ns, seen: map[clustersync.WindowKey]int64{}}
	changes, c, more, err := v.cr.Changes(ctx(t, callTimeout), inc, e.ns, "", 100, nil)
	if err != nil || len(changes) != 0 || more || c == "" {
		t.Fatalf("Changes from no cursor = %d changes, cursor %q, more %v, %v; want none, a cursor, false, nil", len(changes), c, more, err)
	}
	v.cursor = c
	return v
}

// read reads every change since the cursor, limit at a time, applies them
// and returns the windows read.
func (v *changeView) read(t *testing.T, limit int) map[clustersync.WindowKey]bool {
	t.Helper()
	got := map[clustersync.WindowKey]bool{}
	for range 100_000 {
		changes, next, more, err := v.cr.Changes(ctx(t, callTimeout), v.inc, v.ns, v.cursor, limit, nil)
		if err != nil {
			t.Fatalf("Changes since %q: %v", v.cursor, err)
		}
		if limit > 0 && len(changes) > limit {
			t.Fatalf("Changes(limit %d) returned %d", limit, len(changes))
		}
		if next == "" {
			t.Fatalf("Changes since %q returned no cursor", v.cursor)
		}
		for _, c := range changes {
			if c.Namespace != v.ns {
				t.Fatalf("change of namespace %q in a read of %q", c.Namespace, v.ns)
			}
			v.seen[c.WindowKey] = c.Others
			got[c.WindowKey] = true
		}
		v.cursor = next
		if !more {
			return got
		}
	}
	t.Fatal("Changes reported more for 100 000 calls")
	return nil
}

// want checks that the view's sum of each window is want[i].
func (v *changeView) want(t *testing.T, keys []clustersync.WindowKey, want []int64) {
	t.Helper()
	for i, k := range keys {
		if got, ok := v.seen[k]; !ok || got != want[i] {
			t.Errorf("reader %s: window %s: others = %d (read: %v), want %d", v.inc, show(k), got, ok, want[i])
		}
	}
}

func testChangesRead(t *testing.T, e *env) {
	a, b, r := e.inc("a"), e.inc("b"), e.inc("r")
	v := e.changeView(t, r)
	k1, k2, k3 := e.key("k1"), e.key("k2"), e.key("k3")
	e.push(t, a, e.row(k1, 1_000_000), e.row(k2, 2_000_000))
	e.push(t, b, e.row(k1, 5_000_000))
	e.push(t, r, e.row(k3, 7_000_000), e.row(k1, 100)) // the reader's own rows
	got := v.read(t, 100)
	v.want(t, []clustersync.WindowKey{k1, k2}, []int64{6_000_000, 2_000_000})
	if got[k3] && v.seen[k3] != 0 {
		t.Errorf("window written only by the reader: others = %d, want 0", v.seen[k3])
	}
	// A newer total of a window already read, and a release.
	e.push(t, a, e.row(k1, 3_000_000), e.row(k2, -1_000_000))
	got = v.read(t, 100)
	if !got[k1] || !got[k2] {
		t.Errorf("rewritten windows not reported: %v", got)
	}
	v.want(t, []clustersync.WindowKey{k1, k2}, []int64{8_000_000, -1_000_000})
	// Another namespace's writes are not this one's.
	other := e.key("k1")
	other.Namespace = e.ns + ".other"
	e.push(t, a, e.row(other, 1))
	v.read(t, 100)
}

// testChangesLatePush: a write that lands after a reader's cursor but
// carries an older version (another writer's clock lags, or its push was
// delayed) changes the sum and must be reported: a store that reads
// "version > V" misses it.
func testChangesLatePush(t *testing.T, e *env) {
	a, b, r := e.inc("a"), e.inc("b"), e.inc("r")
	v := e.changeView(t, r)
	k := e.key("k")
	old := e.row(k, 2_000_000) // b's version, taken first
	e.push(t, a, e.row(k, 1_000_000))
	v.read(t, 100)
	v.want(t, []clustersync.WindowKey{k}, []int64{1_000_000})
	e.push(t, b, old)
	v.read(t, 100)
	v.want(t, []clustersync.WindowKey{k}, []int64{3_000_000})
	// The same with a window no one wrote before the read.
	k2 := e.key("k2")
	old2 := e.row(k2, 4_000_000)
	e.push(t, a, e.row(k, 1_500_000))
	v.read(t, 100)
	e.push(t, b, old2)
	v.read(t, 100)
	v.want(t, []clustersync.WindowKey{k, k2}, []int64{3_500_000, 4_000_000})
}

// testChangesEveryWrite: PushFetch and GroupAllower.AllowGroup (a
// single Allow and a group) record their writes too.
func testChangesEveryWrite(t *testing.T, e *env) {
	a, r := e.inc("a"), e.inc("r")
	v := e.changeView(t, r)
	var keys []clustersync.WindowKey
	var want []int64
	if pf, ok := e.s.(clustersync.PushFetcher); ok {
		k := e.key("pushfetch")
		if err := pf.PushFetch(ctx(t, callTimeout), a, []clustersync.Row{e.row(k, 2_000_000)}, make([]int64, 1)); err != nil {
			t.Fatalf("PushFetch: %v", err)
		}
		keys, want = append(keys, k), append(want, 2_000_000)
	}
	if ga, ok := e.s.(clustersync.GroupAllower); ok {
		// A single Allow (a group of one), then a group of two.
		at := e.minute + int64(10*time.Second)
		req := e.allowReq(a, time.Minute, 100_000_000, 1_000_000, 0, 0, at)
		req.Limits[0].Cur.Key, req.Limits[0].Prev.Key = "allow", "allow"
		res, err := AllowOne(ctx(t, callTimeout), ga, req)
		if err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v; want allowed", res, err)
		}
		keys, want = append(keys, req.Limits[0].Cur.WindowKey), append(want, 1_000_000)
		k := e.key("group")
		w := e.groupWindow(k, time.Minute, 0, 0, at, 1)
		group := &clustersync.GroupAllowRequest{Inc: a, At: at, Windows: []clustersync.GroupWindow{w},
			Entries: []clustersync.GroupEntry{{Cost: 1_000_000, Limits: []clustersync.GroupLimit{{Window: 0, Limit: 100_000_000}}},
				{Cost: 2_000_000, Limits: []clustersync.GroupLimit{{Window: 0, Limit: 100_000_000}}}}}
		if err := ga.AllowGroup(ctx(t, callTimeout), group, make([]bool, 2), make([][2]int64, 1)); err != nil {
			t.Fatalf("AllowGroup: %v", err)
		}
		keys, want = append(keys, w.Cur.WindowKey), append(want, 3_000_000)
	}
	if len(keys) == 0 {
		t.Skipf("%T has neither PushFetch nor Allow", e.s)
	}
	v.read(t, 100)
	v.want(t, keys, want)
}

// testChangesPages: a read of more changes than its limit continues from
// the cursor it returns, and loses nothing.
func testChangesPages(t *testing.T, e *env) {
	a, r := e.inc("a"), e.inc("r")
	v := e.changeView(t, r)
	var keys []clustersync.WindowKey
	var want []int64
	var rows []clustersync.Row
	for i := range 250 {
		k := e.key(fmt.Sprintf("p%d", i))
		keys, want = append(keys, k), append(want, int64(i+1))
		rows = append(rows, e.row(k, int64(i+1)))
	}
	e.push(t, a, rows[:100]...)
	e.push(t, a, rows[100:]...)
	v.read(t, 7)
	v.want(t, keys, want)
}

// testChangesConcurrent: while several incarnations push at once, in
// pushes that commit in any order, a reader that reads over and over, and
// once more after the last push, ends with every window's sum.
func testChangesConcurrent(t *testing.T, e *env) {
	const (
		writers = 6
		rounds  = 40
		nkeys   = 20
	)
	r := e.inc("r")
	v := e.changeView(t, r)
	keys := make([]clustersync.WindowKey, nkeys)
	for i := range keys {
		keys[i] = e.key(fmt.Sprintf("c%d", i))
	}
	c := ctx(t, 5*time.Minute)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		inc := e.inc(fmt.Sprintf("w%d", w))
		wg.Go(func() {
			total := int64(0)
			for i := range rounds {
				total += int64(w + 1)
				rows := []clustersync.Row{
					e.row(keys[(w+i)%nkeys], total),
					e.row(keys[(3*w+2*i+1)%nkeys], total),
				}
				if err := e.s.Push(c, inc, rows); err != nil {
					t.Errorf("writer %d: Push: %v", w, err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			changes, next, _, err := v.cr.Changes(c, r, e.ns, v.cursor, 5, nil)
			if err != nil {
				t.Errorf("Changes during the pushes: %v", err)
				return
			}
			for _, ch := range changes {
				v.seen[ch.WindowKey] = ch.Others
			}
			v.cursor = next
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	v.read(t, 5)
	want := make([]int64, nkeys)
	if err := e.s.Fetch(c, r, keys, want); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	v.want(t, keys, want)
}

// testChangesLost: a cursor the store did not issue, or one its log was
// trimmed past, reads as lost, never as "nothing changed".
func testChangesLost(t *testing.T, e *env) {
	cr := as[clustersync.ChangeReader](t, e)
	r := e.inc("r")
	for _, bad := range []clustersync.Cursor{"bogus", "\x00"} {
		if _, _, _, err := cr.Changes(ctx(t, callTimeout), r, e.ns, bad, 10, nil); !errors.Is(err, clustersync.ErrChangesLost) {
			t.Errorf("Changes since %q: err = %v, want ErrChangesLost", bad, err)
		}
	}
	tr, ok := e.s.(ChangeTrimmer)
	if !ok {
		t.Logf("%T has no TrimChanges: trimming not checked", e.s)
		return
	}
	a := e.inc("a")
	v := e.changeView(t, r)
	e.push(t, a, e.row(e.key("k"), 1))
	if err := tr.TrimChanges(ctx(t, callTimeout), e.ns); err != nil {
		t.Fatalf("TrimChanges: %v", err)
	}
	if _, _, _, err := cr.Changes(ctx(t, callTimeout), r, e.ns, v.cursor, 10, nil); !errors.Is(err, clustersync.ErrChangesLost) {
		t.Errorf("Changes since a trimmed cursor: err = %v, want ErrChangesLost", err)
	}
	// A new cursor works again.
	v = e.changeView(t, r)
	e.push(t, a, e.row(e.key("k"), 2))
	v.read(t, 10)
	v.want(t, []clustersync.WindowKey{e.key("k")}, []int64{2})
}

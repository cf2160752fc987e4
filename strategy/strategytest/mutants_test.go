package strategytest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/strategy/memory"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The suite must be able to fail: each mutant is the memory store with one
// deliberate bug, and the subtest named next to it must catch it. Each
// mutant runs in a child process (this test binary again), because a
// failing subtest cannot be contained inside the parent test.

const mutantEnv = "STRATEGYTEST_MUTANT"

var mutants = []struct {
	name    string
	subtest string // -test.run pattern below TestMutantChild
	store   func() clustersync.Store
}{
	{"ignores versions", "^older_version_never_overwrites_newer$", func() clustersync.Store { return &lastWriteWins{Store: memory.New()} }},
	{"fetch includes own rows", "^own_rows_excluded_from_fetch$", func() clustersync.Store { return &fetchAll{memory.New()} }},
	{"namespace and key joined by |", "^key_encoding$", func() clustersync.Store { return &joinedKey{memory.New()} }},
	{"sums in float64", "^exact_totals$", func() clustersync.Store { return &floatSums{memory.New()} }},
	{"start truncated to seconds", "^sub-second_windows$", func() clustersync.Store { return &secondStarts{memory.New()} }},
	{"unknown keys left untouched", "^unknown_keys_read_zero$", func() clustersync.Store { return &sparseFetch{memory.New()} }},
	{"context ignored", "^cancelled_context$", func() clustersync.Store { return &noCtx{memory.New()} }},
	{"close ignored", "^closed$", func() clustersync.Store { return &noClose{memory.New()} }},
	{"allow ignores previous window", "^atomic_allow$/^sliding_previous_window$", func() clustersync.Store { return &noPrev{memory.New()} }},
	{"allow always counts", "^atomic_allow$/^count_rejected$", func() clustersync.Store { return &alwaysCount{memory.New()} }},
	{"allow checks the first limit only", "^atomic_allow$/^all_limits_must_admit$", func() clustersync.Store { return &firstLimit{memory.New()} }},
	{"group entries decided on the totals sent", "^group_allow$/^entries_in_order$", func() clustersync.Store { return &groupFirstTotals{memory.New()} }},
	{"group ignores CountRejected", "^group_allow$/^count_rejected_and_larger_costs$", func() clustersync.Store { return &groupNoCountRejected{memory.New()} }},
	{"bucket calls never replayed", "^bucket_retry_takes_once$", func() clustersync.Store { return &bucketFreshVersions{Store: memory.New()} }},
	{"bucket totals not caught up", "^bucket_catch_up$", func() clustersync.Store { return &bucketNoCatchUp{memory.New()} }},
	{"buckets taken one by one", "^bucket_all_or_none$", func() clustersync.Store { return &bucketOneByOne{memory.New()} }},
	{"bucket key cut at NUL", "^bucket_keys$", func() clustersync.Store { return &bucketCutKey{memory.New()} }},
	{"bucket take in float32", "^bucket_arithmetic$", func() clustersync.Store { return &bucketFloatTake{memory.New()} }},
	{"lease acquire as count then put", "^lease_exact_under_concurrency$", func() clustersync.Store { return &leaseCountThenPut{memory.New()} }},
	{"lease release not remembered", "^lease_releases_remembered$", func() clustersync.Store { return newLeaseSets(releaseForgotten) }},
	{"lease replay counted twice", "^lease_arithmetic$", func() clustersync.Store { return newLeaseSets(replayCountedTwice) }},
	{"lease replay refused at the limit", "^lease_arithmetic$", func() clustersync.Store { return newLeaseSets(replayRefusedAtLimit) }},
	{"lease expiry by the wall clock", "^lease_arithmetic$", func() clustersync.Store { return &leaseWallClock{memory.New()} }},
	{"lease expiry ignored", "^lease_arithmetic$", func() clustersync.Store { return &leaseFirstNow{Store: memory.New()} }},
	{"changes read by version", "^changes_late_push$", func() clustersync.Store { return newVersionChanges() }},
	{"changes cut at one page", "^changes_pages$", func() clustersync.Store { return &onePage{memory.New()} }},
	{"changes lost read as none", "^changes_lost$", func() clustersync.Store { return &lossHidden{memory.New()} }},
}

// TestSuiteCatchesMutants runs the suite against each mutant in a child
// process (the child runs this test with $STRATEGYTEST_MUTANT set) and
// expects the mutant's subtest to fail there.
func TestSuiteCatchesMutants(t *testing.T) {
	if name := os.Getenv(mutantEnv); name != "" {
		for _, m := range mutants {
			if m.name == name {
				strategytest.Run(t, func(*testing.T) clustersync.Store { return m.store() })
				return
			}
		}
		t.Fatalf("no mutant %q", name)
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteCatchesMutants$/"+m.subtest, "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name)
			out, err := cmd.CombinedOutput()
			sub := strings.NewReplacer("^", "", "$", "").Replace(m.subtest)
			if err == nil || !strings.Contains(string(out), "--- FAIL: TestSuiteCatchesMutants/"+sub) {
				t.Errorf("subtest %s did not catch the mutant (child error %v); output:\n%s", m.subtest, err, out)
			}
		})
	}
}

// lastWriteWins replaces every version by a fresh, larger one.
type lastWriteWins struct {
	*memory.Store
	v atomic.Int64
}

func (s *lastWriteWins) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	rs := append([]clustersync.Row(nil), rows...)
	for i := range rs {
		rs[i].Version = s.v.Add(1)
	}
	return s.Store.Push(ctx, inc, rs)
}

// fetchAll counts the caller's own rows as others.
type fetchAll struct{ *memory.Store }

func (s *fetchAll) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	for i, k := range keys {
		n, err := s.Window(ctx, k)
		if err != nil {
			return err
		}
		others[i] = n
	}
	return nil
}

// joinedKey stores namespace + "|" + key, which is not injective.
type joinedKey struct{ *memory.Store }

func join(k clustersync.WindowKey) clustersync.WindowKey {
	k.Key, k.Namespace = k.Namespace+"|"+k.Key, ""
	return k
}

func (s *joinedKey) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	rs := append([]clustersync.Row(nil), rows...)
	for i := range rs {
		rs[i].WindowKey = join(rs[i].WindowKey)
	}
	return s.Store.Push(ctx, inc, rs)
}

func (s *joinedKey) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	ks := make([]clustersync.WindowKey, len(keys))
	for i, k := range keys {
		ks[i] = join(k)
	}
	return s.Store.Fetch(ctx, inc, ks, others)
}

func (s *joinedKey) Window(ctx context.Context, k clustersync.WindowKey) (int64, error) {
	return s.Store.Window(ctx, join(k))
}

// floatSums passes every sum through float64.
type floatSums struct{ *memory.Store }

func (s *floatSums) Window(ctx context.Context, k clustersync.WindowKey) (int64, error) {
	n, err := s.Store.Window(ctx, k)
	return int64(float64(n)), err
}

func (s *floatSums) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	rs := append([]clustersync.Row(nil), rows...)
	for i := range rs {
		rs[i].Total = int64(float64(rs[i].Total))
	}
	return s.Store.Push(ctx, inc, rs)
}

// secondStarts truncates window starts to whole seconds.
type secondStarts struct{ *memory.Store }

func trunc(k clustersync.WindowKey) clustersync.WindowKey {
	k.Start -= k.Start % 1e9
	return k
}

func (s *secondStarts) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	rs := append([]clustersync.Row(nil), rows...)
	for i := range rs {
		rs[i].WindowKey = trunc(rs[i].WindowKey)
	}
	return s.Store.Push(ctx, inc, rs)
}

func (s *secondStarts) Window(ctx context.Context, k clustersync.WindowKey) (int64, error) {
	return s.Store.Window(ctx, trunc(k))
}

func (s *secondStarts) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	ks := make([]clustersync.WindowKey, len(keys))
	for i, k := range keys {
		ks[i] = trunc(k)
	}
	return s.Store.Fetch(ctx, inc, ks, others)
}

// sparseFetch writes only the non-zero sums.
type sparseFetch struct{ *memory.Store }

func (s *sparseFetch) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	tmp := make([]int64, len(keys))
	if err := s.Store.Fetch(ctx, inc, keys, tmp); err != nil {
		return err
	}
	for i, n := range tmp {
		if n != 0 {
			others[i] = n
		}
	}
	return nil
}

// noCtx ignores the caller's context.
type noCtx struct{ *memory.Store }

func (s *noCtx) Push(_ context.Context, inc string, rows []clustersync.Row) error {
	return s.Store.Push(context.Background(), inc, rows)
}

func (s *noCtx) Fetch(_ context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	return s.Store.Fetch(context.Background(), inc, keys, others)
}

func (s *noCtx) Window(_ context.Context, k clustersync.WindowKey) (int64, error) {
	return s.Store.Window(context.Background(), k)
}

// noClose never closes.
type noClose struct{ *memory.Store }

func (s *noClose) Close() error { return nil }

// noPrev decides as if the previous windows were empty.
type noPrev struct{ *memory.Store }

func (s *noPrev) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	r := *req
	r.Windows = append([]clustersync.GroupWindow(nil), req.Windows...)
	for i := range r.Windows {
		r.Windows[i].Prev.Key += "\x00elsewhere"
		r.Windows[i].Prev.Total = 0
	}
	return s.Store.AllowGroup(ctx, &r, allowed, others)
}

// alwaysCount counts the cost of rejected calls too.
type alwaysCount struct{ *memory.Store }

func (s *alwaysCount) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	r := *req
	r.Entries = append([]clustersync.GroupEntry(nil), req.Entries...)
	for i := range r.Entries {
		r.Entries[i].CountRejected = true
	}
	return s.Store.AllowGroup(ctx, &r, allowed, others)
}

// firstLimit checks only each entry's first limit, and writes every
// window's rows as if the others admitted.
type firstLimit struct{ *memory.Store }

func (s *firstLimit) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	r := *req
	r.Entries = append([]clustersync.GroupEntry(nil), req.Entries...)
	for i := range r.Entries {
		if len(r.Entries[i].Limits) > 1 {
			r.Entries[i].Limits = r.Entries[i].Limits[:1]
		}
	}
	return s.Store.AllowGroup(ctx, &r, allowed, others)
}

// minimal is a store with none of the optional interfaces.
type minimal struct{ s *memory.Store }

func (m minimal) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	return m.s.Push(ctx, inc, rows)
}

func (m minimal) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	return m.s.Fetch(ctx, inc, keys, others)
}

func (m minimal) Close() error { return m.s.Close() }

func (minimal) Abilities() clustersync.Abilities { return 0 }

// TestMinimalStore: a store with only the required methods passes the
// suite, which checks what it declares and, for what it does not, that
// a Syncer over it refuses cleanly or serves without.
func TestMinimalStore(t *testing.T) {
	strategytest.Run(t, func(*testing.T) clustersync.Store { return minimal{memory.New()} })
}

// TestMinimalStoreSkipsNothing: over a store that declares nothing, the
// suite runs no subtest of an ability and skips none: it runs one
// refusal subtest per ability instead.
func TestMinimalStoreSkipsNothing(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMinimalStore$", "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"--- PASS: TestMinimalStore/round_trip", "--- PASS: TestMinimalStore/declared_abilities_implemented",
		"--- PASS: TestMinimalStore/without_atomic_decision", "--- PASS: TestMinimalStore/without_buckets",
		"--- PASS: TestMinimalStore/without_leases", "--- PASS: TestMinimalStore/without_push-fetch_or_change_reads"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"--- SKIP", "TestMinimalStore/window", "TestMinimalStore/push_fetch", "TestMinimalStore/lease_arithmetic"} {
		if strings.Contains(string(out), unwanted) {
			t.Errorf("output holds %q:\n%s", unwanted, out)
		}
	}
}

// bucketFreshVersions gives every bucket call a fresh version, so a retry
// is taken again.
type bucketFreshVersions struct {
	*memory.Store
	v atomic.Int64
}

func (s *bucketFreshVersions) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	cs := append([]clustersync.BucketCall(nil), calls...)
	v := s.v.Add(1) + 1<<60
	for i := range cs {
		cs[i].Version = v
	}
	return s.Store.Buckets(ctx, inc, at, take, cs, replies)
}

// bucketNoCatchUp drops the totals a call brings.
type bucketNoCatchUp struct{ *memory.Store }

func (s *bucketNoCatchUp) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	cs := append([]clustersync.BucketCall(nil), calls...)
	for i := range cs {
		cs[i].Total = 0
	}
	return s.Store.Buckets(ctx, inc, at, take, cs, replies)
}

// bucketOneByOne takes from each bucket of a call apart.
type bucketOneByOne struct{ *memory.Store }

func (s *bucketOneByOne) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	all := true
	for i := range calls {
		ok, err := s.Store.Buckets(ctx, inc, at, take, calls[i:i+1], replies[i:i+1])
		if err != nil {
			return false, err
		}
		all = all && ok
	}
	return all, nil
}

// bucketCutKey keeps a key up to its first NUL byte.
type bucketCutKey struct{ *memory.Store }

func (s *bucketCutKey) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	cs := append([]clustersync.BucketCall(nil), calls...)
	for i := range cs {
		if j := strings.IndexByte(cs[i].Bucket.Key, 0); j >= 0 {
			cs[i].Bucket.Key = cs[i].Bucket.Key[:j]
		}
	}
	return s.Store.Buckets(ctx, inc, at, take, cs, replies)
}

// bucketFloatTake rounds a take through float32, as a store computing
// in floating point of too little precision would.
type bucketFloatTake struct{ *memory.Store }

func (s *bucketFloatTake) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	return s.Store.Buckets(ctx, inc, int64(float32(at)), int64(float32(take)), calls, replies)
}

// leaseCountThenPut decides an acquire by a Count, then a Put in another
// call: not atomic, so concurrent acquires can all see a free slot.
type leaseCountThenPut struct{ *memory.Store }

func (s *leaseCountThenPut) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	for i, op := range ops {
		if op.Kind == clustersync.LeaseAcquire {
			count := op
			count.Kind, count.ID = clustersync.LeaseCount, ""
			if err := s.Store.Leases(ctx, now, []clustersync.LeaseOp{count}, replies[i:i+1]); err != nil {
				return err
			}
			if replies[i].Held < op.Limit {
				op.Kind = clustersync.LeasePut
			}
			runtime.Gosched() // the round trip between the two calls
		}
		if err := s.Store.Leases(ctx, now, []clustersync.LeaseOp{op}, replies[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// leaseWallClock judges expiry by its own clock instead of the caller's
// now.
type leaseWallClock struct{ *memory.Store }

func (s *leaseWallClock) Leases(ctx context.Context, _ int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	return s.Store.Leases(ctx, time.Now().UnixNano(), ops, replies)
}

// leaseFirstNow keeps the first now it is given: nothing ever expires.
type leaseFirstNow struct {
	*memory.Store
	first atomic.Int64
}

func (s *leaseFirstNow) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	s.first.CompareAndSwap(0, now)
	return s.Store.Leases(ctx, s.first.Load(), ops, replies)
}

// leaseSets is the memory store with lease sets of its own, applied by
// apply: clustersync.ApplyLease with one deliberate bug.
type leaseSets struct {
	*memory.Store
	apply func(s *clustersync.LeaseSet, now int64, op clustersync.LeaseOp) clustersync.LeaseReply
	mu    gosync.Mutex
	sets  map[[2]string]*clustersync.LeaseSet
}

func newLeaseSets(apply func(*clustersync.LeaseSet, int64, clustersync.LeaseOp) clustersync.LeaseReply) *leaseSets {
	return &leaseSets{Store: memory.New(), apply: apply, sets: map[[2]string]*clustersync.LeaseSet{}}
}

func (s *leaseSets) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if len(replies) != len(ops) {
		return errors.New("leases: len(replies) != len(ops)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, op := range ops {
		k := [2]string{op.Namespace, op.Key}
		if s.sets[k] == nil {
			s.sets[k] = &clustersync.LeaseSet{}
		}
		replies[i] = s.apply(s.sets[k], now, op)
	}
	return nil
}

// releaseForgotten removes a released id without remembering it.
func releaseForgotten(s *clustersync.LeaseSet, now int64, op clustersync.LeaseOp) clustersync.LeaseReply {
	r := clustersync.ApplyLease(s, now, op)
	if op.Kind == clustersync.LeaseRelease {
		delete(s.Released, op.ID)
	}
	return r
}

// replayCountedTwice holds a second lease for a replayed acquire.
func replayCountedTwice(s *clustersync.LeaseSet, now int64, op clustersync.LeaseOp) clustersync.LeaseReply {
	_, live := s.Live[op.ID]
	if op.Kind == clustersync.LeaseAcquire && live && op.Expiry > now {
		twice := op
		twice.Kind, twice.ID = clustersync.LeasePut, op.ID+"\x00again"
		clustersync.ApplyLease(s, now, twice)
	}
	return clustersync.ApplyLease(s, now, op)
}

// replayRefusedAtLimit refuses a replayed acquire when the limit is
// reached, as if it were a new lease.
func replayRefusedAtLimit(s *clustersync.LeaseSet, now int64, op clustersync.LeaseOp) clustersync.LeaseReply {
	if op.Kind == clustersync.LeaseAcquire {
		count := op
		count.Kind, count.ID = clustersync.LeaseCount, ""
		if r := clustersync.ApplyLease(s, now, count); r.Held >= op.Limit {
			r.OK = false
			return r
		}
	}
	return clustersync.ApplyLease(s, now, op)
}

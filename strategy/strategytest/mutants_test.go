package strategytest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

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
	{"bucket calls never replayed", "^bucket_retry_takes_once$", func() clustersync.Store { return &bucketFreshVersions{Store: memory.New()} }},
	{"bucket totals not caught up", "^bucket_catch_up$", func() clustersync.Store { return &bucketNoCatchUp{memory.New()} }},
	{"buckets taken one by one", "^bucket_all_or_none$", func() clustersync.Store { return &bucketOneByOne{memory.New()} }},
	{"bucket key cut at NUL", "^bucket_keys$", func() clustersync.Store { return &bucketCutKey{memory.New()} }},
	{"bucket take in float32", "^bucket_arithmetic$", func() clustersync.Store { return &bucketFloatTake{memory.New()} }},
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

func (s *noPrev) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	req.Limits = append([]clustersync.AllowLimit(nil), req.Limits...)
	for i := range req.Limits {
		req.Limits[i].Prev.Key += "\x00elsewhere"
		req.Limits[i].Prev.Total = 0
	}
	return s.Store.Allow(ctx, req)
}

// alwaysCount counts the cost of rejected calls too.
type alwaysCount struct{ *memory.Store }

func (s *alwaysCount) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	req.CountRejected = true
	return s.Store.Allow(ctx, req)
}

// firstLimit checks only the first limit, then writes the others' rows as
// if admitted.
type firstLimit struct{ *memory.Store }

func (s *firstLimit) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	if len(req.Limits) < 2 {
		return s.Store.Allow(ctx, req)
	}
	first := req
	first.Limits = req.Limits[:1]
	res, err := s.Store.Allow(ctx, first)
	if err != nil {
		return res, err
	}
	rows := make([]clustersync.Row, 0, 2*len(req.Limits))
	for _, l := range req.Limits[1:] {
		cur := l.Cur
		if res.Allowed || req.CountRejected {
			cur.Total += req.Cost
		}
		rows = append(rows, l.Prev, cur)
	}
	if err := s.Push(ctx, req.Inc, rows); err != nil {
		return res, err
	}
	for range req.Limits[1:] {
		res.Others = append(res.Others, [2]int64{})
	}
	return res, nil
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

// TestMinimalStore: a store with only the required methods passes the
// suite, which leaves out the optional subtests.
func TestMinimalStore(t *testing.T) {
	strategytest.Run(t, func(*testing.T) clustersync.Store { return minimal{memory.New()} })
}

// TestOptionalSubtestAlone: an optional subtest selected alone with -run,
// against a store without its interface, is skipped rather than failed.
func TestOptionalSubtestAlone(t *testing.T) {
	for _, sub := range []string{"window", "push_fetch", "atomic_allow"} {
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMinimalStore$/^"+sub+"$", "-test.count=1", "-test.v")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- SKIP: TestMinimalStore/"+sub) {
				t.Errorf("child error %v, want a skipped %s; output:\n%s", err, sub, out)
			}
		})
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

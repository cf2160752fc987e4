package grpcfront

import (
	"strings"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// leaseNamespaces are testNamespaces plus "short", whose leases live at
// most a minute.
func leaseNamespaces() []node.Config {
	return append(testNamespaces(),
		node.Config{Name: "short", WindowSizes: []time.Duration{time.Second}, MaxLeaseTTL: time.Minute})
}

func acquireReq(key string, limit int64, ttl time.Duration) *limiterv1.AcquireRequest {
	return &limiterv1.AcquireRequest{Key: key, Limit: limit, Ttl: dur(ttl)}
}

// acquire acquires and fails the test on an error.
func (s *testServer) acquire(tb testing.TB, req *limiterv1.AcquireRequest) *limiterv1.AcquireResponse {
	tb.Helper()
	resp, err := s.client.Acquire(bg, req)
	if err != nil {
		tb.Fatalf("Acquire(%v): %v", req, err)
	}
	return resp
}

func (s *testServer) release(tb testing.TB, lease string) *limiterv1.ReleaseResponse {
	tb.Helper()
	resp, err := s.client.Release(bg, &limiterv1.ReleaseRequest{Lease: lease})
	if err != nil {
		tb.Fatalf("Release: %v", err)
	}
	return resp
}

func (s *testServer) renew(tb testing.TB, lease string, ttl time.Duration) *limiterv1.RenewResponse {
	tb.Helper()
	resp, err := s.client.Renew(bg, &limiterv1.RenewRequest{Lease: lease, Ttl: dur(ttl)})
	if err != nil {
		tb.Fatalf("Renew: %v", err)
	}
	return resp
}

// checkGranted fails unless resp granted a lease expiring at exp with held
// leases held after it.
func checkGranted(tb testing.TB, what string, resp *limiterv1.AcquireResponse, held int64, exp time.Time) {
	tb.Helper()
	if !resp.GetAcquired() || resp.GetLease() == "" || resp.GetHeld() != held ||
		!resp.GetExpiresAt().AsTime().Equal(exp) || resp.GetRetryAfter() != nil {
		tb.Errorf("%s = %v; want acquired, a lease, held %d, expires_at %v, no retry_after", what, resp, held, exp)
	}
}

// checkRefused fails unless resp refused with held leases held and a
// retry after retry.
func checkRefused(tb testing.TB, what string, resp *limiterv1.AcquireResponse, held int64, retry time.Duration) {
	tb.Helper()
	if resp.GetAcquired() || resp.GetLease() != "" || resp.GetExpiresAt() != nil || resp.GetHeld() != held ||
		resp.GetRetryAfter().AsDuration() != retry {
		tb.Errorf("%s = %v; want refused, held %d, retry_after %v", what, resp, held, retry)
	}
}

func TestLeaseAcquireRelease(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	first := s.acquire(t, acquireReq("db", 2, 10*time.Second))
	checkGranted(t, "first", first, 1, minute.Add(10*time.Second))
	clock.Add(3 * time.Second)
	second := s.acquire(t, acquireReq("db", 2, 10*time.Second))
	checkGranted(t, "second", second, 2, minute.Add(13*time.Second))
	if first.GetLease() == second.GetLease() {
		t.Errorf("two leases share the id %q", first.GetLease())
	}
	// Full: refused until the first lease expires, 7 s from now.
	checkRefused(t, "third", s.acquire(t, acquireReq("db", 2, 10*time.Second)), 2, 7*time.Second)
	// Another key, or a higher limit for the same key, is decided on its own.
	checkGranted(t, "other key", s.acquire(t, acquireReq("cache", 1, time.Second)), 1, minute.Add(4*time.Second))
	checkGranted(t, "limit 3", s.acquire(t, acquireReq("db", 3, time.Second)), 3, minute.Add(4*time.Second))

	if r := s.release(t, first.GetLease()); !r.GetReleased() || r.GetPending() {
		t.Errorf("Release = %v, want released, not pending", r)
	}
	if r := s.release(t, first.GetLease()); r.GetReleased() || r.GetPending() {
		t.Errorf("second Release = %v, want released false", r)
	}
	// The limit-3 lease (1 s) has expired too: one held, one free.
	clock.Add(time.Second)
	checkGranted(t, "after the release", s.acquire(t, acquireReq("db", 2, 10*time.Second)), 2, minute.Add(14*time.Second))
	// Expiry frees a lease without a release.
	clock.Add(10 * time.Second)
	checkGranted(t, "after the expiries", s.acquire(t, acquireReq("db", 2, 10*time.Second)), 1, minute.Add(24*time.Second))
	if r := s.release(t, second.GetLease()); r.GetReleased() {
		t.Errorf("Release of an expired lease = %v, want released false", r)
	}
}

func TestLeaseRenew(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	a := s.acquire(t, acquireReq("job", 1, 10*time.Second))
	clock.Add(5 * time.Second)
	if r := s.renew(t, a.GetLease(), 10*time.Second); !r.GetRenewed() || !r.GetExpiresAt().AsTime().Equal(minute.Add(15*time.Second)) {
		t.Errorf("Renew = %v, want renewed until %v", r, minute.Add(15*time.Second))
	}
	// Past the first expiry, the lease still holds the key.
	clock.Add(8 * time.Second)
	checkRefused(t, "Acquire after the first expiry", s.acquire(t, acquireReq("job", 1, time.Second)), 1, 2*time.Second)
	// A renewal may also shorten a lease.
	if r := s.renew(t, a.GetLease(), time.Second); !r.GetRenewed() || !r.GetExpiresAt().AsTime().Equal(minute.Add(14*time.Second)) {
		t.Errorf("shortening Renew = %v, want renewed until %v", r, minute.Add(14*time.Second))
	}
	if r := s.release(t, a.GetLease()); !r.GetReleased() {
		t.Errorf("Release = %v, want released", r)
	}
	if r := s.renew(t, a.GetLease(), 10*time.Second); r.GetRenewed() || r.GetExpiresAt() != nil {
		t.Errorf("Renew of a released lease = %v, want renewed false, no expires_at", r)
	}
	// An expired lease is not renewed either.
	b := s.acquire(t, acquireReq("job", 1, time.Second))
	clock.Add(time.Second)
	if r := s.renew(t, b.GetLease(), 10*time.Second); r.GetRenewed() {
		t.Errorf("Renew of an expired lease = %v, want renewed false", r)
	}
}

func TestLeaseBadRequests(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute), leaseNamespaces()...)
	good := s.acquire(t, acquireReq("k", 1, time.Second)).GetLease()
	nopeLease := ratelimit.LeaseID{Namespace: "nope", Key: "k", Holder: 1, Serial: 1}.String()
	acq := func(ns, key string, limit int64, ttl *durationpb.Duration) *limiterv1.AcquireRequest {
		return &limiterv1.AcquireRequest{Namespace: ns, Key: key, Limit: limit, Ttl: ttl}
	}
	for _, c := range []struct {
		badCase
		acquire *limiterv1.AcquireRequest
		release *limiterv1.ReleaseRequest
		renew   *limiterv1.RenewRequest
	}{
		{badCase: badCase{"limit 0", codes.InvalidArgument, "limit", []string{"at least 1", "got 0"}}, acquire: acq("", "k", 0, dur(time.Second))},
		{badCase: badCase{"negative limit", codes.InvalidArgument, "limit", []string{"got -1"}}, acquire: acq("", "k", -1, dur(time.Second))},
		{badCase: badCase{"no ttl", codes.InvalidArgument, "ttl", []string{"must be positive"}}, acquire: acq("", "k", 1, nil)},
		{badCase: badCase{"ttl 0", codes.InvalidArgument, "ttl", []string{"must be positive", "got 0s"}}, acquire: acq("", "k", 1, dur(0))},
		{badCase: badCase{"negative ttl", codes.InvalidArgument, "ttl", []string{"got -1s"}}, acquire: acq("", "k", 1, dur(-time.Second))},
		{badCase: badCase{"ttl above the default max", codes.InvalidArgument, "ttl", []string{"max_lease_ttl 1h0m0s", "got 1h0m0.001s"}}, acquire: acq("", "k", 1, dur(time.Hour+time.Millisecond))},
		{badCase: badCase{"ttl above the namespace's max", codes.InvalidArgument, "ttl", []string{"max_lease_ttl 1m0s", "got 1m1s"}}, acquire: acq("short", "k", 1, dur(61*time.Second))},
		{badCase: badCase{"malformed ttl", codes.InvalidArgument, "ttl", nil}, acquire: acq("", "k", 1, &durationpb.Duration{Seconds: 1, Nanos: -1})},
		{badCase: badCase{"empty key", codes.InvalidArgument, "key", []string{"must not be empty"}}, acquire: acq("", "", 1, dur(time.Second))},
		{badCase: badCase{"1025-byte key", codes.InvalidArgument, "key", []string{"at most 1024 bytes"}}, acquire: acq("", strings.Repeat("k", 1025), 1, dur(time.Second))},
		{badCase: badCase{"unknown namespace", codes.NotFound, "namespace", []string{`"nope"`}}, acquire: acq("nope", "k", 1, dur(time.Second))},

		{badCase: badCase{"release: empty lease", codes.InvalidArgument, "lease", []string{"empty"}}, release: &limiterv1.ReleaseRequest{}},
		{badCase: badCase{"release: not base64", codes.InvalidArgument, "lease", []string{"not URL-safe base64"}}, release: &limiterv1.ReleaseRequest{Lease: "lease-1!"}},
		{badCase: badCase{"release: truncated", codes.InvalidArgument, "lease", nil}, release: &limiterv1.ReleaseRequest{Lease: good[:10]}},
		{badCase: badCase{"release: too long", codes.InvalidArgument, "lease", []string{"too long"}}, release: &limiterv1.ReleaseRequest{Lease: strings.Repeat("A", 4096)}},
		{badCase: badCase{"release: unknown namespace", codes.NotFound, "namespace", []string{`"nope"`}}, release: &limiterv1.ReleaseRequest{Lease: nopeLease}},

		{badCase: badCase{"renew: malformed lease", codes.InvalidArgument, "lease", nil}, renew: &limiterv1.RenewRequest{Lease: "x", Ttl: dur(time.Second)}},
		{badCase: badCase{"renew: no ttl", codes.InvalidArgument, "ttl", []string{"must be positive"}}, renew: &limiterv1.RenewRequest{Lease: good}},
		{badCase: badCase{"renew: ttl above max", codes.InvalidArgument, "ttl", []string{"max_lease_ttl"}}, renew: &limiterv1.RenewRequest{Lease: good, Ttl: dur(2 * time.Hour)}},
		{badCase: badCase{"renew: malformed ttl", codes.InvalidArgument, "ttl", nil}, renew: &limiterv1.RenewRequest{Lease: good, Ttl: &durationpb.Duration{Seconds: -1, Nanos: 1}}},
		{badCase: badCase{"renew: unknown namespace", codes.NotFound, "namespace", nil}, renew: &limiterv1.RenewRequest{Lease: nopeLease, Ttl: dur(time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			switch {
			case c.acquire != nil:
				_, err = s.client.Acquire(bg, c.acquire)
			case c.release != nil:
				_, err = s.client.Release(bg, c.release)
			default:
				_, err = s.client.Renew(bg, c.renew)
			}
			checkStatus(t, err, c.code, c.field, c.contains...)
		})
	}
	// A refused request took nothing: the one lease is still the only one.
	checkRefused(t, "after the bad requests", s.acquire(t, acquireReq("k", 1, time.Second)), 1, time.Second)
	if r := s.release(t, good); !r.GetReleased() {
		t.Errorf("Release of the good lease = %v, want released", r)
	}
}

// TestLeaseForeignLocalOnly: a local-only namespace's lease is released and
// renewed only at the server that granted it; another server (another
// node, so another lease table) refuses with FAILED_PRECONDITION.
func TestLeaseForeignLocalOnly(t *testing.T) {
	clock := fakeclock.New(minute)
	a, b := newTestServer(t, clock), newTestServer(t, clock)
	lease := a.acquire(t, acquireReq("k", 1, time.Minute)).GetLease()
	_, err := b.client.Release(bg, &limiterv1.ReleaseRequest{Lease: lease})
	checkStatus(t, err, codes.FailedPrecondition, "lease", "local only")
	_, err = b.client.Renew(bg, &limiterv1.RenewRequest{Lease: lease, Ttl: dur(time.Minute)})
	checkStatus(t, err, codes.FailedPrecondition, "lease", "local only")
	// b's refusal left a's lease alone.
	if r := a.release(t, lease); !r.GetReleased() {
		t.Errorf("Release at the granting server = %v, want released", r)
	}
}

// itemErr checks that a batch item failed with code naming field.
func itemErr(tb testing.TB, st *spb.Status, code codes.Code, field string) {
	tb.Helper()
	checkStatus(tb, status.ErrorProto(st), code, field) // nil st: no error, which fails
}

func TestLeaseBatches(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	acq, err := s.client.AcquireBatch(bg, &limiterv1.AcquireBatchRequest{Items: []*limiterv1.AcquireRequest{
		acquireReq("a", 1, time.Minute),
		acquireReq("a", 0, time.Minute),
		{Key: "a", Limit: 1},
		acquireReq("a", 1, time.Minute), // refused: the first item holds a
		{Namespace: "nope", Key: "a", Limit: 1, Ttl: dur(time.Minute)},
		acquireReq("b", 2, time.Minute),
	}})
	if err != nil {
		t.Fatal(err)
	}
	res := acq.GetResults()
	if len(res) != 6 {
		t.Fatalf("AcquireBatch: %d results, want 6", len(res))
	}
	checkGranted(t, "item 0", res[0].GetResponse(), 1, minute.Add(time.Minute))
	checkRefused(t, "item 3", res[3].GetResponse(), 1, time.Minute)
	checkGranted(t, "item 5", res[5].GetResponse(), 1, minute.Add(time.Minute))
	for i, want := range []struct {
		code  codes.Code
		field string
	}{1: {codes.InvalidArgument, "limit"}, 2: {codes.InvalidArgument, "ttl"}, 4: {codes.NotFound, "namespace"}} {
		if want.field == "" {
			if res[i].GetError() != nil {
				t.Errorf("item %d: error %v, want none", i, res[i].GetError())
			}
			continue
		}
		if res[i].GetResponse() != nil {
			t.Errorf("item %d: response %v next to its error", i, res[i].GetResponse())
		}
		itemErr(t, res[i].GetError(), want.code, want.field)
	}
	la, lb := res[0].GetResponse().GetLease(), res[5].GetResponse().GetLease()

	clock.Add(10 * time.Second)
	ren, err := s.client.RenewBatch(bg, &limiterv1.RenewBatchRequest{Items: []*limiterv1.RenewRequest{
		{Lease: la, Ttl: dur(time.Minute)},
		{Lease: "bad", Ttl: dur(time.Minute)},
		{Lease: lb},
		{Lease: lb, Ttl: dur(time.Second)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rr := ren.GetResults()
	if len(rr) != 4 {
		t.Fatalf("RenewBatch: %d results, want 4", len(rr))
	}
	if r := rr[0].GetResponse(); !r.GetRenewed() || !r.GetExpiresAt().AsTime().Equal(minute.Add(70*time.Second)) {
		t.Errorf("RenewBatch item 0 = %v, want renewed until +70s", rr[0])
	}
	itemErr(t, rr[1].GetError(), codes.InvalidArgument, "lease")
	itemErr(t, rr[2].GetError(), codes.InvalidArgument, "ttl")
	if r := rr[3].GetResponse(); !r.GetRenewed() || !r.GetExpiresAt().AsTime().Equal(minute.Add(11*time.Second)) {
		t.Errorf("RenewBatch item 3 = %v, want renewed until +11s", rr[3])
	}

	rel, err := s.client.ReleaseBatch(bg, &limiterv1.ReleaseBatchRequest{Items: []*limiterv1.ReleaseRequest{
		{Lease: la}, {Lease: ""}, {Lease: la}, {Lease: lb},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rl := rel.GetResults()
	if len(rl) != 4 {
		t.Fatalf("ReleaseBatch: %d results, want 4", len(rl))
	}
	for i, want := range []bool{0: true, 2: false, 3: true} {
		if i == 1 {
			itemErr(t, rl[1].GetError(), codes.InvalidArgument, "lease")
			continue
		}
		if r := rl[i].GetResponse(); rl[i].GetError() != nil || r.GetReleased() != want {
			t.Errorf("ReleaseBatch item %d = %v, want released %v", i, rl[i], want)
		}
	}

	// A batch over the cap is refused as a whole.
	over := make([]*limiterv1.ReleaseRequest, service.MaxBatchItems+1)
	for i := range over {
		over[i] = &limiterv1.ReleaseRequest{Lease: la}
	}
	_, err = s.client.ReleaseBatch(bg, &limiterv1.ReleaseBatchRequest{Items: over})
	checkStatus(t, err, codes.InvalidArgument, "items", "at most 10000 items")
	overAcq := make([]*limiterv1.AcquireRequest, service.MaxBatchItems+1)
	for i := range overAcq {
		overAcq[i] = acquireReq("a", 1, time.Second)
	}
	_, err = s.client.AcquireBatch(bg, &limiterv1.AcquireBatchRequest{Items: overAcq})
	checkStatus(t, err, codes.InvalidArgument, "items", "at most 10000 items")
	overRen := make([]*limiterv1.RenewRequest, service.MaxBatchItems+1)
	for i := range overRen {
		overRen[i] = &limiterv1.RenewRequest{Lease: la, Ttl: dur(time.Second)}
	}
	_, err = s.client.RenewBatch(bg, &limiterv1.RenewBatchRequest{Items: overRen})
	checkStatus(t, err, codes.InvalidArgument, "items", "at most 10000 items")
}

// TestLeaseRace: 8 callers racing for a limit of 5 get exactly 5 leases,
// round after round.
func TestLeaseRace(t *testing.T) {
	s := newTestServer(t, nil)
	const callers, limit, rounds = 8, 5, 20
	for round := range rounds {
		key := "race" + strings.Repeat("!", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		resps := make([]*limiterv1.AcquireResponse, callers)
		errs := make([]error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resps[i], errs[i] = s.client.Acquire(bg, acquireReq(key, limit, time.Minute))
			}()
		}
		close(start)
		wg.Wait()
		granted := 0
		for i, r := range resps {
			if errs[i] != nil {
				t.Fatalf("round %d: %v", round, errs[i])
			}
			if r.GetAcquired() {
				granted++
			} else if r.GetHeld() != limit {
				t.Errorf("round %d: a refusal says held %d, want %d", round, r.GetHeld(), limit)
			}
		}
		if granted != limit {
			t.Fatalf("round %d: %d of %d callers got a lease of a limit of %d, want exactly %d", round, granted, callers, limit, limit)
		}
	}
}

// syncLeaseServer serves "default" as a synchronous namespace over a
// faulty memory store.
func syncLeaseServer(t *testing.T, clock *fakeclock.Clock, onDown clustersync.StoreDownPolicy) (*testServer, *memory.Faulty) {
	t.Helper()
	store := memory.NewFaulty(memory.New())
	cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second}, Shared: true}
	s := newSyncingTestServer(t, clock, func(n *node.Node) []*clustersync.Syncer {
		ns, _ := n.Namespace("")
		sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, store, "test/1", clustersync.NewVersions(clock.Now), clustersync.Config{OnStoreDown: onDown}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return []*clustersync.Syncer{sy}
	}, cfg)
	return s, store
}

// TestLeaseStoreDown: a synchronous namespace whose store fails refuses an
// Acquire with UNAVAILABLE ("refuse") or decides it locally ("local"); a
// release that cannot reach the store is pending.
func TestLeaseStoreDown(t *testing.T) {
	clock := fakeclock.New(minute)
	t.Run("refuse", func(t *testing.T) {
		s, store := syncLeaseServer(t, clock, clustersync.StoreDownRefuse)
		lease := s.acquire(t, acquireReq("k", 2, time.Minute)).GetLease()
		store.Fail(nil)
		_, err := s.client.Acquire(bg, acquireReq("k", 2, time.Minute))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Acquire with the store down: %v, want UNAVAILABLE", err)
		}
		if r := s.release(t, lease); r.GetReleased() || !r.GetPending() {
			t.Errorf("Release with the store down = %v, want pending", r)
		}
	})
	t.Run("local", func(t *testing.T) {
		s, store := syncLeaseServer(t, clock, clustersync.StoreDownLocal)
		store.Fail(nil)
		checkGranted(t, "Acquire with the store down", s.acquire(t, acquireReq("k", 1, time.Minute)), 1, clock.Now().Add(time.Minute))
		checkRefused(t, "second Acquire", s.acquire(t, acquireReq("k", 1, time.Minute)), 1, time.Minute)
	})
}

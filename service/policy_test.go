package service_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// newPolicyService serves one namespace, "default", with windows of 1 s
// and 1 min in the mode of syncRate (over a new in-memory store when it
// syncs), holding policies, in shadow mode when shadow. It returns the
// service, the node and the clock.
func newPolicyService(tb testing.TB, syncRate float64, policies map[string]ratelimit.Policy, shadow bool) (*service.Service, *node.Node, *fakeclock.Clock) {
	tb.Helper()
	clock := fakeclock.New(now)
	mode := modeOf(tb, syncRate)
	cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: shared(mode),
		Policies: policies, Shadow: shadow}
	n, err := node.New([]node.Config{cfg}, clock)
	if err != nil {
		tb.Fatal(err)
	}
	ns, err := n.Namespace("")
	if err != nil {
		tb.Fatal(err)
	}
	var syncers []*clustersync.Syncer
	if shared(mode) {
		store := memory.New(memory.WithClock(clock.Now))
		sy, err := clustersync.NewSyncer(ns, mode, store, clustersync.NewIncarnation("test"),
			clustersync.NewVersions(clock.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		syncers = append(syncers, sy)
	}
	s, err := service.New(n, syncers...)
	if err != nil {
		tb.Fatal(err)
	}
	return s, n, clock
}

// engineLimits returns ls as the engine's limits (a policy's).
func engineLimits(ls ...service.Limit) []ratelimit.Limit {
	out := make([]ratelimit.Limit, len(ls))
	for i, l := range ls {
		out[i] = ratelimit.Limit{Size: l.Size, Limit: l.Limit, Kind: ratelimit.LimitKind(l.Kind), Strict: l.Strict,
			Token:       ratelimit.TokenBucket{Max: l.Token.Max, RefillTime: l.Token.RefillTime, RefillAmount: l.Token.RefillAmount},
			Leaky:       ratelimit.LeakyBucket{Size: l.Leaky.Size, Interval: l.Leaky.Interval},
			WaitTimeout: l.WaitTimeout,
			Fixed:       ratelimit.FixedBucket{Period: l.Fixed.Period, Limit: l.Fixed.Limit}}
	}
	return out
}

// policyCases are limits of every kind Allow checks, alone and together.
var policyCases = []struct {
	name   string
	limits []service.Limit
	mixed  bool // windows and buckets: not in one synchronous Allow
}{
	{"sliding window", []service.Limit{lim(time.Minute, 3), lim(time.Second, 2)}, false},
	{"token", []service.Limit{{Kind: service.TokenKind, Token: service.TokenBucket{Max: 3, RefillTime: 10 * time.Second, RefillAmount: 1}, Strict: true}}, false},
	{"leaky", []service.Limit{leaky(3, 6*time.Second, 0)}, false},
	{"fixed", []service.Limit{fixed(time.Minute, 3)}, false},
	{"mixed", []service.Limit{lim(time.Minute, 4), fixed(time.Minute, 3), token(5, time.Minute)}, true},
}

// TestPolicyDecidesAsListedLimits is the acceptance test of policies: an
// Allow naming a policy decides, call after call, exactly as an Allow
// listing the same limits, for every kind of limit and in every mode
// (answers, statuses, retry hints; each on a service of its own, on
// clocks that move together).
func TestPolicyDecidesAsListedLimits(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		for _, tc := range policyCases {
			if tc.mixed && m.syncRate == 0 {
				continue
			}
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				pol, _, pc := newPolicyService(t, m.syncRate, map[string]ratelimit.Policy{"login": {Limits: engineLimits(tc.limits...)}}, false)
				lst, _, lc := newPolicyService(t, m.syncRate, nil, false)
				allowed, refused := 0, 0
				for i := range 12 {
					cost := f64(float64(i%2 + 1))
					var a, b [service.MaxLimits]service.LimitStatus
					got, err := pol.Allow(ctx, service.AllowRequest{Key: "k", Policy: "login", Cost: cost}, a[:0])
					if err != nil {
						t.Fatalf("call %d with the policy: %v", i, err)
					}
					want, err := lst.Allow(ctx, service.AllowRequest{Key: "k", Limits: tc.limits, Cost: cost}, b[:0])
					if err != nil {
						t.Fatalf("call %d with the limits: %v", i, err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("call %d: with the policy %+v\nwith its limits listed %+v", i, got, want)
					}
					if got.Allowed {
						allowed++
					} else {
						refused++
					}
					pc.Add(700 * time.Millisecond)
					lc.Add(700 * time.Millisecond)
				}
				if allowed == 0 || refused == 0 {
					t.Errorf("%d allowed, %d refused: the sequence must meet the limit", allowed, refused)
				}
			})
		}
	}
}

// TestPolicyErrors: an unknown policy is INVALID_ARGUMENT on "policy"
// naming it, after the namespace and before the time; a policy with
// limits too is refused on "policy"; neither, as before, on "limits".
func TestPolicyErrors(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newPolicyService(t, -1, map[string]ratelimit.Policy{"login": {Limits: engineLimits(lim(time.Minute, 3))}}, false)
	for _, tc := range []struct {
		name   string
		req    service.AllowRequest
		field  string
		err    error
		reason string
	}{
		{"unknown", service.AllowRequest{Key: "k", Policy: "signup"}, "policy", service.ErrUnknownPolicy, `policy "signup" is not defined in namespace "default"`},
		{"unknown before at", service.AllowRequest{Key: "k", Policy: "signup", At: now.Add(time.Hour)}, "policy", service.ErrUnknownPolicy, ""},
		{"at after the policy", service.AllowRequest{Key: "k", Policy: "login", At: now.Add(time.Hour)}, "at", service.ErrInvalidValue, ""},
		{"key", service.AllowRequest{Policy: "login"}, "key", service.ErrInvalidKey, ""},
		{"both", service.AllowRequest{Key: "k", Policy: "login", Limits: []service.Limit{lim(time.Minute, 3)}}, "policy", service.ErrInvalidLimit, ""},
		{"neither", service.AllowRequest{Key: "k"}, "limits", service.ErrInvalidLimit, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Allow(ctx, tc.req, nil)
			var fe *service.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want a FieldError on %q wrapping %v", err, tc.field, tc.err)
			}
			if tc.reason != "" && fe.Reason != tc.reason {
				t.Errorf("reason %q, want %q", fe.Reason, tc.reason)
			}
		})
	}
	if _, err := s.Allow(ctx, service.AllowRequest{Namespace: "nope", Key: "k", Policy: "login"}, nil); !errors.Is(err, service.ErrUnknownNamespace) {
		t.Errorf("an unknown namespace with a policy: %v, want ErrUnknownNamespace", err)
	}
}

// TestPolicyChangeTakesTheNextCall: a change of the namespace's config
// that changes a policy (as a reload or the admin API makes) decides the
// next call by the new limits, counts carried over.
func TestPolicyChangeTakesTheNextCall(t *testing.T) {
	ctx := context.Background()
	cfg := func(limit float64) node.Config {
		return node.Config{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, Policies: map[string]ratelimit.Policy{"login": {Limits: engineLimits(lim(time.Minute, limit))}}}
	}
	clock := fakeclock.New(now)
	n, err := node.New([]node.Config{cfg(2)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	allow := func() bool {
		t.Helper()
		d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Policy: "login"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for i, want := range []bool{true, true, false} {
		if got := allow(); got != want {
			t.Fatalf("call %d under 2 per minute: allowed %v, want %v", i+1, got, want)
		}
	}
	change, err := n.Prepare([]node.Config{cfg(3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(change.Replaced) != 1 {
		t.Fatalf("a policy change replaces the namespace: %+v", change)
	}
	if err := n.Commit(change); err != nil {
		t.Fatal(err)
	}
	if err := service.Reroute(ctx, s); err != nil {
		t.Fatal(err)
	}
	change.Replaced[0].CopyWindows(clock.Now(), false)
	if !allow() {
		t.Fatal("the third call under the new policy (3 per minute) is refused")
	}
	if allow() {
		t.Fatal("a fourth call under 3 per minute is admitted: the counts were not carried over")
	}
}

// TestDryRun is the acceptance test of shadow mode: a shadow limit of 2
// per minute admits the third call, answering that it was a dry run the
// limits refused; the observer (the decision metrics) sees one would-be
// refusal; the refused call counted nothing, as it would not have. The
// same holds for a namespace in shadow mode.
func TestDryRun(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		for _, where := range []string{"policy", "namespace"} {
			t.Run(m.name+"/"+where, func(t *testing.T) {
				pol := map[string]ratelimit.Policy{"login": {Limits: engineLimits(lim(time.Minute, 2)), Shadow: where == "policy"}}
				base, _, _ := newPolicyService(t, m.syncRate, pol, where == "namespace")
				rec := &recorder{}
				s := base.Observe(service.FrontGRPC, rec)
				for i := range 4 {
					d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Policy: "login"}, nil)
					if err != nil {
						t.Fatal(err)
					}
					wouldAllow := i < 2
					if !d.Allowed || !d.DryRun || d.WouldAllow != wouldAllow {
						t.Fatalf("call %d: allowed %v, dry run %v, would allow %v; want true, true, %v", i+1, d.Allowed, d.DryRun, d.WouldAllow, wouldAllow)
					}
					if !wouldAllow && (d.RetryAfter <= 0 || d.Limits[0].Rate != 2) {
						t.Errorf("call %d: retry after %s, rate %g: want the refusal's hint and the rate of 2 (the refused call counts nothing)", i+1, d.RetryAfter, d.Limits[0].Rate)
					}
				}
				var refusals, allowed int
				for _, o := range rec.got {
					switch {
					case !o.DryRun:
						t.Errorf("a decision observed without DryRun: %+v", o)
					case o.Allowed:
						allowed++
					default:
						refusals++
					}
				}
				if allowed != 2 || refusals != 2 {
					t.Errorf("observed %d admitted and %d would-be refusals, want 2 and 2", allowed, refusals)
				}
			})
		}
	}
	// Limits listed in the call in a shadow namespace are dry runs too;
	// outside shadow mode nothing changes.
	s, _, _ := newPolicyService(t, -1, nil, true)
	for i := range 2 {
		d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: []service.Limit{lim(time.Minute, 1)}}, nil)
		if err != nil || !d.Allowed || !d.DryRun || d.WouldAllow != (i == 0) {
			t.Fatalf("call %d in a shadow namespace: %+v, %v", i+1, d, err)
		}
	}
	s, _, _ = newPolicyService(t, -1, nil, false)
	for i := range 2 {
		d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: []service.Limit{lim(time.Minute, 1)}}, nil)
		if err != nil || d.Allowed != (i == 0) || d.DryRun || d.WouldAllow != d.Allowed {
			t.Fatalf("call %d outside shadow mode: %+v, %v", i+1, d, err)
		}
	}
}

// TestDryRunDoesNotWait: a dry run refused by a leaky bucket it would
// have waited for answers at once, reporting the refusal.
func TestDryRunDoesNotWait(t *testing.T) {
	ctx := context.Background()
	pol := map[string]ratelimit.Policy{"drip": {Limits: engineLimits(leaky(1, time.Second, 30*time.Second)), Shadow: true}}
	s, _, _ := newPolicyService(t, -1, pol, false)
	if d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Policy: "drip"}, nil); err != nil || !d.WouldAllow {
		t.Fatalf("first drop: %+v, %v", d, err)
	}
	done := make(chan service.Decision, 1)
	go func() {
		d, _ := s.Allow(ctx, service.AllowRequest{Key: "k", Policy: "drip"}, nil)
		done <- d
	}()
	select {
	case d := <-done:
		if !d.Allowed || !d.DryRun || d.WouldAllow || d.Wait != 0 {
			t.Errorf("second drop: %+v, want admitted, a dry run the bucket refused, no wait", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a dry run waits for the bucket (the fake clock never moves)")
	}
}

// TestPolicyConcurrent: concurrent calls share a policy's limits (the
// namespace's, never copied) and are exact on one node as listed limits
// are: of 8 × 50 calls on a limit of 100, exactly 100 are admitted. Run
// with -race, it shows that no call writes to the shared limits.
func TestPolicyConcurrent(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			pol := map[string]ratelimit.Policy{"p": {Limits: engineLimits(lim(time.Minute, 100), fixed(time.Minute, 1000), token(1000, time.Minute))}}
			if m.syncRate == 0 {
				pol["p"] = ratelimit.Policy{Limits: engineLimits(lim(time.Minute, 100))}
			}
			s, _, _ := newPolicyService(t, m.syncRate, pol, false)
			var admitted atomicCount
			done := make(chan struct{})
			for range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					for range 50 {
						d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Policy: "p"}, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.add()
						}
					}
				}()
			}
			for range 8 {
				<-done
			}
			if got := admitted.load(); got != 100 {
				t.Errorf("%d admitted, want 100", got)
			}
		})
	}
}

type atomicCount struct{ n atomic.Int64 }

func (c *atomicCount) add()        { c.n.Add(1) }
func (c *atomicCount) load() int64 { return c.n.Load() }

package envoyfront

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const perMinute = `
domain: api
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 10
`

// A sliding window remembers the end of the previous minute: 10 hits just
// before the minute turns still count right after it, where a fixed window
// would admit 10 more.
func TestSlidingWindowAcrossTheMinute(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	client := desc("client", "c1")
	s.clock.Set(minute.Add(59 * time.Second))
	for i := range 10 {
		check(t, "before the minute", s.call(t, "api", 1, client), ok, stat{ok, 10, minUnit, uint32(9 - i)})
	}
	check(t, "11th", s.call(t, "api", 1, client), over, stat{over, 10, minUnit, 0})

	s.clock.Set(minute.Add(60*time.Second + 500*time.Millisecond))
	for range 10 {
		check(t, "just after the minute", s.call(t, "api", 1, client), over, stat{over, 10, minUnit, 0})
	}
	// Half a minute on, the previous minute weighs half: (11+10) × ½ of it
	// plus the 10 refused hits counted in this one... all still over.
	s.clock.Set(minute.Add(90 * time.Second))
	check(t, "half a minute on", s.call(t, "api", 1, client), over, stat{over, 10, minUnit, 0})
	// Two minutes on, nothing of the first remains.
	s.clock.Set(minute.Add(180 * time.Second))
	check(t, "two minutes on", s.call(t, "api", 1, client), ok, stat{ok, 10, minUnit, 9})
}

// With StopIncrementWhenOverLimit, refused hits are not counted, so the
// window frees up as soon as the admitted hits slide out.
func TestStopIncrementWhenOverLimit(t *testing.T) {
	for _, stop := range []bool{false, true} {
		s := newTestServer(t, Config{StopIncrementWhenOverLimit: stop}, map[string]string{"api.yaml": perMinute})
		client := desc("client", "c1")
		check(t, "10", s.call(t, "api", 10, client), ok, stat{ok, 10, minUnit, 0})
		for range 10 {
			s.call(t, "api", 1, client)
		}
		// Two thirds of a minute later the first minute's 10 admitted
		// hits weigh a third: 3.33, room for 6 more — unless the 10
		// refused ones were counted too (20 weigh 6.67, and the refused 6
		// count as well).
		s.clock.Add(time.Minute + 40*time.Second)
		want := stat{over, 10, minUnit, 0}
		if stop {
			want = stat{ok, 10, minUnit, 0}
		}
		check(t, "stop="+map[bool]string{false: "false", true: "true"}[stop], s.call(t, "api", 6, client), want.code, want)
	}
}

func TestHitsAddendPerDescriptor(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	d := desc("client", "c1")
	d.HitsAddend = wrapperspb.UInt64(7)
	check(t, "descriptor's addend wins", s.call(t, "api", 2, d), ok, stat{ok, 10, minUnit, 3})
	check(t, "request's addend", s.call(t, "api", 3, desc("client", "c1")), ok, stat{ok, 10, minUnit, 0})
}

func TestLimitOverride(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	d := desc("client", "c1")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}
	check(t, "3/h", s.call(t, "api", 3, d), ok, stat{ok, 3, rlsv3.RateLimitResponse_RateLimit_HOUR, 0})
	check(t, "4th", s.call(t, "api", 1, d), over, stat{over, 3, rlsv3.RateLimitResponse_RateLimit_HOUR, 0})

	// 5 × 1 s: no 5s window in the namespace.
	d.Limit.Unit, d.Limit.UnitMultiplier = typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(5)
	_, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "5s") {
		t.Errorf("a 5 s override: error %v, want INVALID_ARGUMENT naming 5s", err)
	}
	// 60 × 1 s is the minute window.
	d.Limit.UnitMultiplier = wrapperspb.UInt32(60)
	resp := s.call(t, "api", 1, d)
	check(t, "3 per 60 × 1 s", resp, over, stat{over, 3, second, 0})
	if m := resp.GetStatuses()[0].GetCurrentLimit().GetUnitMultiplier().GetValue(); m != 60 {
		t.Errorf("unit_multiplier = %d, want 60", m)
	}

	d.Limit.Unit, d.Limit.UnitMultiplier = typev3.RateLimitUnit_YEAR, nil
	_, err = s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "YEAR") {
		t.Errorf("a yearly override: error %v, want INVALID_ARGUMENT naming YEAR", err)
	}
}

func TestResponseHeaders(t *testing.T) {
	files := map[string]string{"api.yaml": perMinute + `
  - key: route
    rate_limit:
      unit: second
      requests_per_unit: 100
`}
	s := newTestServer(t, Config{ResponseHeaders: true}, files)
	s.clock.Add(15 * time.Second)
	resp := s.call(t, "api", 4, desc("client", "c1"), desc("route", "r"))
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{"x-ratelimit-limit": "10", "x-ratelimit-remaining": "6", "x-ratelimit-reset": "45"}
	if len(got) != len(want) {
		t.Errorf("headers = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}

	plain := newTestServer(t, Config{}, files)
	if hs := plain.call(t, "api", 1, desc("client", "c1")).GetResponseHeadersToAdd(); len(hs) != 0 {
		t.Errorf("headers without ResponseHeaders: %v, want none", hs)
	}
}

func TestBadRequests(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c")}}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "api"}, "descriptors"},
		{"a key over 1 KiB", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", strings.Repeat("x", 1100))}}, "key"},
	} {
		_, err := s.client.ShouldRateLimit(context.Background(), tc.req)
		if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want INVALID_ARGUMENT about %s", tc.name, err, tc.want)
		}
	}
}

// Distinct descriptors never share a counter, whatever their strings hold.
func TestCounterKeyInjective(t *testing.T) {
	cases := []struct {
		domain string
		kv     []string
	}{
		{"a", []string{"b", "c"}},
		{"a", []string{"b", "c", "", ""}},
		{"a", []string{"b:c", ""}},
		{"a:1", []string{"b", "c"}},
		{"a", []string{"1:b", "c"}},
		{"a1:b", []string{"", "c"}},
		{"a", []string{"b", "1:c"}},
		{"", []string{"a", "b", "c", ""}},
		{"a", []string{"b_c", ""}},
		{"a", []string{"b", "_c"}},
	}
	seen := map[string]int{}
	for i, c := range cases {
		k := counterKey(c.domain, desc(c.kv...), nil)
		if j, dup := seen[k]; dup {
			t.Errorf("cases %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
}

func TestRulesErrors(t *testing.T) {
	sizes := []time.Duration{time.Second, time.Minute}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"window size missing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
			[]string{"descriptors[0].rate_limit", "unit hour needs the window size 3600s", `namespace "envoy"`, "1s, 60s"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{"descriptors[0].descriptors[0].rate_limit.unit", `got "fortnight"`}},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", []string{"unlimited"}},
		{"no domain", "descriptors: []\n", []string{"domain: is required"}},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n", []string{"descriptors[0].key: is required"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", []string{`duplicate descriptor "k_v"`}},
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {}\n", []string{"rate_limits"}},
		{"negative count", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", []string{"-1"}},
		{"replaces without a name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", []string{"replaces[0].name: is required"}},
		{"empty", "", []string{"empty file"}},
	} {
		dir := t.TempDir()
		writeFile(t, dir, "d.yaml", tc.yaml)
		_, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, sizes)
		var re *RulesError
		if !errors.As(err, &re) || !strings.HasSuffix(re.File, "d.yaml") {
			t.Errorf("%s: error %v, want a RulesError naming d.yaml", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}

	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: d\n")
	writeFile(t, dir, "b.yml", "domain: d\n")
	writeFile(t, dir, ".hidden.yaml", "not: [yaml")
	writeFile(t, dir, "notes.txt", "not: [yaml")
	if _, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, sizes); err == nil || !strings.Contains(err.Error(), `domain "d" is also defined in`) {
		t.Errorf("a domain in two files: error %v, want one naming both", err)
	}
}

// Calls served while the rules are reloaded again and again all succeed.
func TestCallsDuringReloads(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.srv.Reload(); err != nil {
				t.Errorf("Reload: %v", err)
				return
			}
		}
	})
	for range 200 {
		_, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c")}})
		if err != nil {
			t.Fatalf("ShouldRateLimit during reloads: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}

// detailed_metric keeps at most MaxDetailedSeries series per descriptor;
// past it, hits count in the configured path's series.
func TestDetailedMetricCap(t *testing.T) {
	s := newTestServer(t, Config{}, readmeExamples)
	n := MaxDetailedSeries + 50
	for i := range n {
		s.call(t, "example8", 1, desc("key1", "v"+strconv.Itoa(i)))
	}
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series, hits := 0, 0.0
	for _, mf := range mfs {
		if mf.GetName() != "limiterd_envoy_rule_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, map[string]string{"domain": "example8"}) {
				series++
				hits += m.GetCounter().GetValue()
			}
		}
	}
	// The detailed series, key1 (the overflow) and key1_value1 (configured).
	if want := MaxDetailedSeries + 2; series != want {
		t.Errorf("example8 has %d hit series, want %d", series, want)
	}
	if hits != float64(n) {
		t.Errorf("example8 hits sum to %g, want %d", hits, n)
	}
	if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "example8", "descriptor": "key1"}); got != 50 {
		t.Errorf("overflow series key1 = %g, want 50", got)
	}
}

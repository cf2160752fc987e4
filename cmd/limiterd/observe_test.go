package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestDecisionsObservedOncePerFront: every front's decisions reach its
// request metrics once each, for every kind: the service reports them,
// and limiterd_decisions_total counts exactly the decisions made.
func TestDecisionsObservedOncePerFront(t *testing.T) {
	grpcAddr, httpAddr, respAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(envoyDomain), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "limiterd.yaml", fmt.Sprintf(envoyDaemonConfig, grpcAddr, httpAddr))
	d := startRun(t, []string{"--config", cfg, "--envoy-config-dir", dir, "--resp-addr", respAddr}, nil)
	conn := d.dial(t, grpcAddr)
	api := limiterv1.NewRateLimiterClient(conn)
	rdb := redisClient(t, d, respAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	window := &limiterv1.Limit{WindowSize: durationpb.New(time.Minute), Limit: 100}
	token := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 100, RefillTime: durationpb.New(time.Minute)}}}
	leaky := &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 100, Interval: durationpb.New(time.Minute)}}}
	fixed := &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(time.Minute), Limit: 100}}}
	allows := map[string][]*limiterv1.Limit{
		"sliding_window": {window}, "token_bucket": {token}, "leaky_bucket": {leaky}, "fixed_bucket": {fixed}, "mixed": {window, token},
	}
	const ns = "envoy"
	for kind, limits := range allows {
		if _, err := api.Allow(ctx, &limiterv1.AllowRequest{Namespace: ns, Key: "g-" + kind, Limits: limits}); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"namespace": %q, "key": "h-%s", "limits": %s}`, ns, kind, jsonLimits(limits))
		resp, err := http.Post("http://"+httpAddr+"/limiter.v1.RateLimiter/Allow", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP Allow %s: %s", kind, resp.Status)
		}
	}
	// Batches: each item is one decision.
	if _, err := api.AllowBatch(ctx, &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{
		{Namespace: ns, Key: "b1", Limits: []*limiterv1.Limit{fixed}}, {Namespace: ns, Key: "b2", Limits: []*limiterv1.Limit{fixed}},
		{Namespace: "nosuch", Key: "b3", Limits: []*limiterv1.Limit{fixed}}, // fails: no decision
	}}); err != nil {
		t.Fatal(err)
	}
	acquire := &limiterv1.AcquireRequest{Namespace: ns, Key: "j", Limit: 10, Ttl: durationpb.New(time.Minute)}
	if _, err := api.Acquire(ctx, acquire); err != nil {
		t.Fatal(err)
	}
	if _, err := api.AcquireBatch(ctx, &limiterv1.AcquireBatchRequest{Items: []*limiterv1.AcquireRequest{acquire, acquire}}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+httpAddr+"/limiter.v1.RateLimiter/Acquire", "application/json",
		strings.NewReader(`{"namespace": "envoy", "key": "hj", "limit": 10, "ttl": "60s"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, cmd := range [][]any{
		{"RL.ALLOW", "r", 60000, 100, "NS", ns},
		{"RL.REDUCE", "r", 100, 60, "NS", ns},
		{"RL.GET", "r", 100, 60, "NS", ns}, // reads: no decision
		{"RL.LEAKY", "r", 100, 60000, "NS", ns},
		{"RL.FIXED", "r", 100, 60000, "NS", ns},
		{"RL.ACQUIRE", "r", 10, 60000, "NS", ns},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	envoy := rlsv3.NewRateLimitServiceClient(conn)
	desc := func(v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: v}}}
	}
	if _, err := envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("10.0.0.1"), desc("10.0.0.2")}}); err != nil {
		t.Fatal(err)
	}

	want := map[string]map[string]float64{
		"grpc":  {"sliding_window": 1, "token_bucket": 1, "leaky_bucket": 1, "fixed_bucket": 3, "mixed": 1, "concurrency": 3},
		"http":  {"sliding_window": 1, "token_bucket": 1, "leaky_bucket": 1, "fixed_bucket": 1, "mixed": 1, "concurrency": 1},
		"resp":  {"sliding_window": 1, "token_bucket": 1, "leaky_bucket": 1, "fixed_bucket": 1, "mixed": 0, "concurrency": 1},
		"envoy": {"sliding_window": 2, "token_bucket": 0, "leaky_bucket": 0, "fixed_bucket": 0, "mixed": 0, "concurrency": 0},
	}
	_, body, _ := httpGet(t, "http://"+httpAddr+"/metrics")
	got := map[string]map[string]float64{}
	for _, m := range decisionLine.FindAllStringSubmatch(body, -1) {
		if m[4] != ns {
			continue
		}
		v, _ := strconv.ParseFloat(m[5], 64)
		if got[m[2]] == nil {
			got[m[2]] = map[string]float64{}
		}
		got[m[2]][m[3]] += v
	}
	for front, kinds := range want {
		for kind, n := range kinds {
			if got[front][kind] != n {
				t.Errorf("front %s, kind %s: %v decisions counted, want %v", front, kind, got[front][kind], n)
			}
		}
	}
}

var decisionLine = regexp.MustCompile(`(?m)^limiterd_decisions_total\{decision="(\w+)",front="(\w+)",kind="(\w+)",limiter_namespace="([^"]+)"\} (\S+)$`)

// jsonLimits writes limits as the JSON API takes them.
func jsonLimits(limits []*limiterv1.Limit) string {
	var parts []string
	for _, l := range limits {
		switch {
		case l.GetToken() != nil:
			parts = append(parts, `{"token": {"max": 100, "refillTime": "60s"}}`)
		case l.GetLeaky() != nil:
			parts = append(parts, `{"leaky": {"size": 100, "interval": "60s"}}`)
		case l.GetFixed() != nil:
			parts = append(parts, `{"fixed": {"period": "60s", "limit": 100}}`)
		default:
			parts = append(parts, `{"windowSize": "60s", "limit": 100}`)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

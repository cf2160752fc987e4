package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestRequestMetricsEveryFront: calls over gRPC, HTTP/JSON and the Redis
// protocol show in /metrics with their front, method and decisions per
// namespace (limiter_namespace); 10^5 distinct keys and unknown namespaces
// add no series.
func TestRequestMetricsEveryFront(t *testing.T) {
	grpcAddr, httpAddr, respAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--resp-addr", respAddr}, nil)
	api := limiterv1.NewRateLimiterClient(d.dial(t, grpcAddr))
	rdb := redisClient(t, d, respAddr)
	ctx := context.Background()
	allow := &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Minute), Limit: 1}}}
	for range 2 { // allowed, then denied
		if _, err := api.Allow(ctx, allow); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+httpAddr+"/limiter.v1.RateLimiter/Increment", "application/json", strings.NewReader(`{"key": "h"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := rdb.Do(ctx, "RL.REDUCE", "r", 2, 60).Err(); err != nil {
		t.Fatal(err)
	}
	series := func() (string, int) {
		t.Helper()
		code, body, _ := httpGet(t, "http://"+httpAddr+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		return body, strings.Count(body, "\nlimiterd_")
	}
	body, before := series()
	for _, want := range []string{
		`limiterd_requests_total{code="OK",front="grpc",method="limiter.v1.RateLimiter/Allow"} 2`,
		`limiterd_decisions_total{decision="allowed",front="grpc",kind="sliding_window",limiter_namespace="default"} 1`,
		`limiterd_decisions_total{decision="denied",front="grpc",kind="sliding_window",limiter_namespace="default"} 1`,
		`front="http",method="limiter.v1.RateLimiter/Increment"`,
		`limiterd_request_duration_seconds_count{front="resp"`,
		`limiterd_build_info{`,
		`limiterd_active_keys{limiter_namespace="default"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A flood of keys and of namespaces nobody configured.
	// Batches of 1000 items, each decision counted: 10^5 keys.
	for b := range 100 {
		batch := &limiterv1.AllowBatchRequest{}
		for i := range 1000 {
			req := &limiterv1.AllowRequest{Key: fmt.Sprintf("flood-%d-%d", b, i), Limits: allow.Limits}
			if i%100 == 0 {
				req.Namespace = fmt.Sprintf("nope-%d-%d", b, i)
			}
			batch.Items = append(batch.Items, req)
		}
		if _, err := api.AllowBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&b, `{"namespace": "nope-%d", "key": "x"}`, i)
		resp, err := http.Post("http://"+httpAddr+"/limiter.v1.RateLimiter/Increment", "application/json", strings.NewReader(b.String()))
		b.Reset()
		if err == nil {
			resp.Body.Close()
		}
	}
	_, after := series()
	t.Logf("series: %d before the flood, %d after", before, after)
	if after > before+6 {
		t.Errorf("the flood added %d series (from %d), want only a few outcome series", after-before, before)
	}
}

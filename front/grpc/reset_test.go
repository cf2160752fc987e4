package grpcfront

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestResetBucketsAndLeases: Reset with buckets makes them new and
// answers no rates; with leases it frees the key's leases; a malformed
// bucket or a sliding window among the buckets is INVALID_ARGUMENT
// naming buckets[i].
func TestResetBucketsAndLeases(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	token := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: dur(time.Hour)}}}
	allow := func() bool {
		t.Helper()
		r, err := s.client.Allow(ctx, &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{token}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetAllowed()
	}
	allow()
	if allow() {
		t.Fatal("a second take of 1 is admitted")
	}
	r, err := s.client.Reset(ctx, &limiterv1.ResetRequest{Key: "k", Buckets: []*limiterv1.Limit{token}})
	if err != nil || len(r.GetRates()) != 0 {
		t.Fatalf("Reset = %v, %v; want no rates", r, err)
	}
	if !allow() {
		t.Error("the bucket is refused after its reset")
	}
	a, err := s.client.Acquire(ctx, &limiterv1.AcquireRequest{Key: "k", Limit: 1, Ttl: dur(time.Minute)})
	if err != nil || !a.GetAcquired() {
		t.Fatalf("Acquire: %v, %v", a, err)
	}
	if _, err := s.client.Reset(ctx, &limiterv1.ResetRequest{Key: "k", Leases: true}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.client.Acquire(ctx, &limiterv1.AcquireRequest{Key: "k", Limit: 1, Ttl: dur(time.Minute)}); err != nil || !a.GetAcquired() {
		t.Errorf("Acquire after the reset of leases: %v, %v; want acquired", a, err)
	}
	_, err = s.client.Reset(ctx, &limiterv1.ResetRequest{Key: "k", Buckets: []*limiterv1.Limit{token,
		{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}}})
	checkStatus(t, err, codes.InvalidArgument, "buckets[1].token.refill_time")
	_, err = s.client.Reset(ctx, &limiterv1.ResetRequest{Key: "k", Buckets: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1}}})
	checkStatus(t, err, codes.InvalidArgument, "buckets[0]", "sliding window")
}

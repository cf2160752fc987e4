package envoyfront

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const benchRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// benchRequests are requests over 1,000 addresses, each with a nested
// descriptor too.
func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		ip := "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("remote_address", ip), desc("message_type", "marketing", "to_number", ip)}}
	}
	return reqs
}

// BenchmarkShouldRateLimit is the handler alone: matching, two Allows and
// the response.
func BenchmarkShouldRateLimit(b *testing.B) {
	s := newBenchServer(b)
	reqs := benchRequests()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.srv.ShouldRateLimit(context.Background(), reqs[n.Add(1)%int64(len(reqs))]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkShouldRateLimitGRPC is a call through gRPC over bufconn.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	s := newBenchServer(b)
	reqs := benchRequests()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.client.ShouldRateLimit(context.Background(), reqs[n.Add(1)%int64(len(reqs))]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func newBenchServer(b *testing.B) *testServer {
	return newTestServer(b, Config{}, map[string]string{"edge.yaml": benchRules})
}

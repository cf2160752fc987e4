package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/client"
)

// BenchmarkAllow calls Allow from parallel goroutines on a stand-in over
// bufconn, one RPC per call and gathered into AllowBatch RPCs.
func BenchmarkAllow(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []client.Option
	}{
		{"direct", nil},
		{"batched-100us-64", []client.Option{client.WithBatching(100*time.Microsecond, 64)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := &fakeLimiter{}
			c := serve(b, f, append(bc.opts, client.WithTimeout(time.Second))...)
			req := allowReq("k", 1e12)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d := c.Allow(context.Background(), req); d.Err != nil {
						b.Error(d.Err)
					}
				}
			})
			b.ReportMetric(float64(f.calls.Load())/float64(b.N), "allows-served/op")
			b.ReportMetric(float64(f.batches.Load())/float64(b.N), "allowbatch-rpcs/op")
		})
	}
}

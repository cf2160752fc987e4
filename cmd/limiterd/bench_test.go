package main

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// The gRPC benchmarks serve newServer over bufconn (in-process, no
// sockets) on the system clock, with the default namespace (1s and 60s,
// local only): they measure the gRPC stack plus the adapter plus the
// engine. Each parallel goroutine uses its own key.

// benchLimits never deny within a benchmark's hits.
var benchLimits = []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1e9}, {WindowSize: dur(time.Minute), Limit: 1e9}}

const batchItems = 100

func reportDecisions(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "decisions/s")
}

// serialOrParallel runs "serial" (one client goroutine) and "parallel"
// (b.RunParallel, GOMAXPROCS goroutines); newOp builds a goroutine's
// operation (request built once) on a key of its own.
func serialOrParallel(b *testing.B, perOp int, newOp func(key string) func() error) {
	b.Run("serial", func(b *testing.B) {
		op := newOp("k")
		b.ReportAllocs()
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		reportDecisions(b, perOp)
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			op := newOp("k" + strconv.FormatInt(n.Add(1), 10))
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportDecisions(b, perOp)
	})
}

func BenchmarkGRPC(b *testing.B) {
	s := newTestServer(b, nil)
	b.Run("Allow", func(b *testing.B) {
		serialOrParallel(b, 1, func(key string) func() error {
			req := &limiterv1.AllowRequest{Key: key, Limits: benchLimits}
			return func() error {
				resp, err := s.client.Allow(bg, req)
				if err == nil && !resp.GetAllowed() {
					err = errors.New("denied")
				}
				return err
			}
		})
	})
	b.Run("Increment", func(b *testing.B) {
		serialOrParallel(b, 1, func(key string) func() error {
			req := &limiterv1.IncrementRequest{Key: key}
			return func() error {
				_, err := s.client.Increment(bg, req)
				return err
			}
		})
	})
	b.Run("AllowBatch100", func(b *testing.B) {
		serialOrParallel(b, batchItems, func(key string) func() error {
			req := allowBatch(key)
			return func() error {
				resp, err := s.client.AllowBatch(bg, req)
				if err == nil && (len(resp.GetResults()) != batchItems || !resp.GetResults()[batchItems-1].GetResponse().GetAllowed()) {
					err = errors.New("batch not allowed")
				}
				return err
			}
		})
	})
}

// allowBatch is 100 Allows over 100 keys of key's own.
func allowBatch(key string) *limiterv1.AllowBatchRequest {
	req := &limiterv1.AllowBatchRequest{Items: make([]*limiterv1.AllowRequest, batchItems)}
	for i := range req.Items {
		req.Items[i] = &limiterv1.AllowRequest{Key: key + "/" + strconv.Itoa(i), Limits: benchLimits}
	}
	return req
}

// BenchmarkAdapter calls the server's methods directly, without gRPC: the
// adapter's own cost and allocations (request conversion, response
// building) on top of the engine's.
func BenchmarkAdapter(b *testing.B) {
	s := newTestServer(b, nil)
	b.Run("Allow", func(b *testing.B) {
		req := &limiterv1.AllowRequest{Key: "k", Limits: benchLimits}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.srv.Allow(bg, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Increment", func(b *testing.B) {
		req := &limiterv1.IncrementRequest{Key: "k"}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.srv.Increment(bg, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AllowBatch100", func(b *testing.B) {
		req := allowBatch("k")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.srv.AllowBatch(bg, req); err != nil {
				b.Fatal(err)
			}
		}
		reportDecisions(b, batchItems)
	})
}

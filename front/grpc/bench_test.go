package grpcfront

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/grpccodec"
)

// The gRPC benchmarks serve NewServer over bufconn (in-process, no
// sockets) on the system clock, with the default namespace (1s and 60s,
// local only): they measure the gRPC stack plus the adapter plus the
// engine. The server encodes with grpccodec, as limiterd does; the client
// with gRPC's default codec, as most clients would. Each parallel
// goroutine uses its own key.

// benchLimits never deny within a benchmark's hits.
var benchLimits = []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1e9}, {WindowSize: dur(time.Minute), Limit: 1e9}}

const batchItems = 100

// benchBuckets are bucket limits that never deny within a benchmark's
// hits, by kind, for the Allow cases next to the sliding windows'.
var benchBuckets = []struct {
	name  string
	limit *limiterv1.Limit
}{
	{"AllowToken", &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1e9, RefillTime: dur(time.Second)}}}},
	{"AllowLeaky", &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1e9, Interval: dur(time.Second)}}}},
	{"AllowFixed", &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: dur(time.Second), Limit: 1e9}}}},
}

// meterDecisions starts counting this process's CPU time; the function it
// returns reports decisions/s and, on Linux, cpu-ns/decision: user+system
// time of every goroutine (in BenchmarkGRPC client and server both) per
// decision, which other load on the machine inflates far less than ns/op.
func meterDecisions(b *testing.B, perOp int) (report func()) {
	cpu0, err := processCPU()
	return func() {
		n := float64(b.N * perOp)
		b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
		if cpu1, err1 := processCPU(); err == nil && err1 == nil {
			b.ReportMetric(float64(cpu1-cpu0)/n, "cpu-ns/decision")
		}
	}
}

// processCPU is utime+stime of /proc/self/stat.
func processCPU() (time.Duration, error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	// Fields 14 and 15, counted after the parenthesised command name.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, errors.New("/proc/self/stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

// serialOrParallel runs "serial" (one client goroutine) and "parallel"
// (b.RunParallel, GOMAXPROCS goroutines); newOp builds a goroutine's
// operation (request built once) on a key of its own.
func serialOrParallel(b *testing.B, perOp int, newOp func(key string) func() error) {
	b.Run("serial", func(b *testing.B) {
		op := newOp("k")
		b.ReportAllocs()
		report := meterDecisions(b, perOp)
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		report()
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		report := meterDecisions(b, perOp)
		b.RunParallel(func(pb *testing.PB) {
			op := newOp("k" + strconv.FormatInt(n.Add(1), 10))
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report()
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
	for _, bb := range benchBuckets {
		b.Run(bb.name, func(b *testing.B) {
			serialOrParallel(b, 1, func(key string) func() error {
				req := &limiterv1.AllowRequest{Key: key, Limits: []*limiterv1.Limit{bb.limit}}
				return func() error {
					resp, err := s.client.Allow(bg, req)
					if err == nil && !resp.GetAllowed() {
						err = errors.New("denied")
					}
					return err
				}
			})
		})
	}
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
	b.Run("IncrementBatch100", func(b *testing.B) {
		serialOrParallel(b, batchItems, func(key string) func() error {
			req := incrementBatch(key)
			return func() error {
				resp, err := s.client.IncrementBatch(bg, req)
				if err == nil && (len(resp.GetResults()) != batchItems || resp.GetResults()[batchItems-1].GetError() != nil) {
					err = errors.New("batch item failed")
				}
				return err
			}
		})
	})
}

// BenchmarkAcquireRelease is one Acquire and one Release of a lease of a
// limit of 1 through the gRPC server (default namespace, local only): the
// cost of a concurrency limit around one request, next to BenchmarkGRPC's
// Allow. The limit of 1 makes a Release that freed nothing fail the next
// Acquire.
func BenchmarkAcquireRelease(b *testing.B) {
	s := newTestServer(b, nil)
	serialOrParallel(b, 1, func(key string) func() error {
		acq := &limiterv1.AcquireRequest{Key: key, Limit: 1, Ttl: dur(time.Minute)}
		rel := &limiterv1.ReleaseRequest{}
		return func() error {
			a, err := s.client.Acquire(bg, acq)
			if err != nil {
				return err
			}
			if !a.GetAcquired() {
				return errors.New("refused")
			}
			rel.Lease = a.GetLease()
			r, err := s.client.Release(bg, rel)
			if err == nil && !r.GetReleased() {
				err = errors.New("not released")
			}
			return err
		}
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

// incrementBatch is 100 Increments over 100 keys of key's own.
func incrementBatch(key string) *limiterv1.IncrementBatchRequest {
	req := &limiterv1.IncrementBatchRequest{Items: make([]*limiterv1.IncrementRequest, batchItems)}
	for i := range req.Items {
		req.Items[i] = &limiterv1.IncrementRequest{Key: key + "/" + strconv.Itoa(i)}
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
	for _, bb := range benchBuckets {
		b.Run(bb.name, func(b *testing.B) {
			req := &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{bb.limit}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.srv.Allow(bg, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
		report := meterDecisions(b, batchItems)
		for b.Loop() {
			if _, err := s.srv.AllowBatch(bg, req); err != nil {
				b.Fatal(err)
			}
		}
		report()
	})
	b.Run("IncrementBatch100", func(b *testing.B) {
		req := incrementBatch("k")
		b.ReportAllocs()
		report := meterDecisions(b, batchItems)
		for b.Loop() {
			if _, err := s.srv.IncrementBatch(bg, req); err != nil {
				b.Fatal(err)
			}
		}
		report()
	})
}

// BenchmarkServerPath is what the server does with a batch call apart from
// gRPC's transport (HTTP/2 framing, flow control, syscalls): decode the
// request with the server's codec, run the adapter and the engine, encode
// the response. Its ns/op over 100 is the server's own CPU per decision.
func BenchmarkServerPath(b *testing.B) {
	s := newTestServer(b, nil)
	var codec grpccodec.Codec
	b.Run("AllowBatch100", func(b *testing.B) {
		benchServerPath(b, allowBatch("k"), func(raw mem.BufferSlice) (any, error) {
			req := new(limiterv1.AllowBatchRequest) // as gRPC does, a new one per call
			if err := codec.Unmarshal(raw, req); err != nil {
				return nil, err
			}
			return s.srv.AllowBatch(bg, req)
		})
	})
	b.Run("IncrementBatch100", func(b *testing.B) {
		benchServerPath(b, incrementBatch("k"), func(raw mem.BufferSlice) (any, error) {
			req := new(limiterv1.IncrementBatchRequest)
			if err := codec.Unmarshal(raw, req); err != nil {
				return nil, err
			}
			return s.srv.IncrementBatch(bg, req)
		})
	})
}

// benchServerPath encodes req once, then per operation has handle decode
// and serve it, and encodes handle's response.
func benchServerPath(b *testing.B, req any, handle func(mem.BufferSlice) (any, error)) {
	var codec grpccodec.Codec
	raw, err := codec.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Free()
	b.ReportAllocs()
	report := meterDecisions(b, batchItems)
	for b.Loop() {
		resp, err := handle(raw)
		if err != nil {
			b.Fatal(err)
		}
		out, err := codec.Marshal(resp)
		if err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
	report()
}

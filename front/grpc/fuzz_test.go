package grpcfront

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// fuzzServer is a server with the test namespaces and a synchronous one,
// "sync", over the in-memory store.
func fuzzServer(tb testing.TB) *testServer {
	tb.Helper()
	cfgs := append(testNamespaces(), node.Config{Name: "sync", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true})
	return newSyncingTestServer(tb, fakeclock.New(minute.Add(500*time.Millisecond)), func(n *node.Node) []*clustersync.Syncer {
		ns, err := n.Namespace("sync")
		if err != nil {
			tb.Fatal(err)
		}
		sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, memory.New(), clustersync.NewIncarnation("fuzz"), clustersync.NewVersions(time.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		return []*clustersync.Syncer{sy}
	}, cfgs...)
}

// The request kinds FuzzHandlers decodes its bytes as.
const (
	fuzzIncrement = iota
	fuzzSlidingWindow
	fuzzAllow
	fuzzIncrementBatch
	fuzzAllowBatch
	fuzzKinds
)

func fuzzSeeds() []proto.Message {
	at := ts(minute.Add(200 * time.Millisecond))
	return []proto.Message{
		&limiterv1.IncrementRequest{Key: "k", At: at},
		&limiterv1.SlidingWindowRequest{Namespace: "api", Key: "k", WindowSize: dur(time.Second), CurDiff: f64(2)},
		&limiterv1.AllowRequest{Namespace: "sync", Key: "k", Cost: f64(0.5), CountRejected: true,
			Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 3}, {WindowSize: dur(time.Minute), Limit: 10}}},
		&limiterv1.IncrementBatchRequest{Items: []*limiterv1.IncrementRequest{
			{Namespace: "tiny", Key: "a"}, {Namespace: "tiny", Key: "b"}, {Namespace: "tiny", Key: "c"},
			{Namespace: "sync", Key: "d", Value: f64(-1.5), WindowSize: dur(time.Minute)}}},
		&limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{
			{Namespace: "nope", Key: "x"}, {Key: "", Limits: []*limiterv1.Limit{{Limit: math.Inf(1)}}}}},
	}
}

// FuzzHandlers decodes bytes as a request of each kind and serves it:
// no request panics; each answer is a response or a status with a code
// the API documents for bad input (never Internal or Unknown), and the
// same for every item of a batch; no rate in a response is NaN.
func FuzzHandlers(f *testing.F) {
	for i, m := range fuzzSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(fuzzIncrement), []byte{0x12, 0x01, 0x00}) // key "\x00"
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch kind % fuzzKinds {
		case fuzzIncrement:
			var req limiterv1.IncrementRequest
			if proto.Unmarshal(data, &req) != nil {
				return // gRPC refuses it before any handler
			}
			resp, err := s.srv.Increment(ctx, &req)
			checkFuzzAnswer(t, err)
			checkFuzzRates(t, resp.GetRates())
		case fuzzSlidingWindow:
			var req limiterv1.SlidingWindowRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			resp, err := s.srv.SlidingWindow(ctx, &req)
			checkFuzzAnswer(t, err)
			checkFuzzRates(t, resp.GetRates())
		case fuzzAllow:
			var req limiterv1.AllowRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			resp, err := s.srv.Allow(ctx, &req)
			checkFuzzAnswer(t, err)
			checkFuzzAllow(t, resp)
		case fuzzIncrementBatch:
			var req limiterv1.IncrementBatchRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			resp, err := s.srv.IncrementBatch(ctx, &req)
			checkFuzzAnswer(t, err)
			if err == nil && len(resp.GetResults()) != len(req.GetItems()) {
				t.Fatalf("%d results for %d items", len(resp.GetResults()), len(req.GetItems()))
			}
			for _, r := range resp.GetResults() {
				checkFuzzAnswer(t, status.FromProto(r.GetError()).Err())
				checkFuzzRates(t, r.GetResponse().GetRates())
			}
		case fuzzAllowBatch:
			var req limiterv1.AllowBatchRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			resp, err := s.srv.AllowBatch(ctx, &req)
			checkFuzzAnswer(t, err)
			if err == nil && len(resp.GetResults()) != len(req.GetItems()) {
				t.Fatalf("%d results for %d items", len(resp.GetResults()), len(req.GetItems()))
			}
			for _, r := range resp.GetResults() {
				checkFuzzAnswer(t, status.FromProto(r.GetError()).Err())
				checkFuzzAllow(t, r.GetResponse())
			}
		}
	})
}

// checkFuzzAnswer fails on an error that is not a status for bad input.
func checkFuzzAnswer(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not a gRPC status", err, err)
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted:
	default:
		t.Fatalf("status %v (%q): want InvalidArgument, NotFound or ResourceExhausted for bad input", st.Code(), st.Message())
	}
	if st.Message() == "" {
		t.Fatalf("status %v without a message", st.Code())
	}
}

func checkFuzzRates(t *testing.T, rs []*limiterv1.WindowRate) {
	t.Helper()
	for _, r := range rs {
		if math.IsNaN(r.GetRate()) || r.GetWindowSize().AsDuration() <= 0 {
			t.Fatalf("rate %v", r)
		}
	}
}

func checkFuzzAllow(t *testing.T, resp *limiterv1.AllowResponse) {
	t.Helper()
	for _, l := range resp.GetLimits() {
		if math.IsNaN(l.GetRate()) || math.IsNaN(l.GetRemaining()) || l.GetResetAfter().AsDuration() < 0 {
			t.Fatalf("limit status %v", l)
		}
	}
	if resp.GetRetryAfter().AsDuration() < 0 {
		t.Fatalf("retry_after %v", resp.GetRetryAfter().AsDuration())
	}
}

package grpcfront

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/service"
)

// badCase is one malformed request and the status it must get.
type badCase struct {
	name     string
	code     codes.Code
	field    string
	contains []string
}

// target is what IncrementRequest, SlidingWindowRequest and AllowRequest
// share.
type target struct {
	namespace, key string
	size           *durationpb.Duration
	at             *timestamppb.Timestamp
}

// badNow is the fake clock's time in the bad-input tests; "default" (1s,
// 60s) accepts `at` in [badNow − 60s, badNow + 1s].
var badNow = minute.Add(30 * time.Second)

// badTargets are the malformed namespaces, keys, window sizes and times,
// wrong in every call the same way. sizeField is how the call names the
// window size.
func badTargets(sizeField string) []struct {
	badCase
	target
} {
	ok := target{key: "k"}
	with := func(f func(*target)) target { t := ok; f(&t); return t }
	type c = struct {
		badCase
		target
	}
	return []c{
		{badCase{"unknown namespace", codes.NotFound, "namespace", []string{`"nope"`, "not configured"}}, with(func(t *target) { t.namespace = "nope" })},
		{badCase{"empty key", codes.InvalidArgument, "key", []string{"must not be empty"}}, with(func(t *target) { t.key = "" })},
		{badCase{"1025-byte key", codes.InvalidArgument, "key", []string{"at most 1024 bytes", "got 1025"}}, with(func(t *target) { t.key = strings.Repeat("k", 1025) })},
		{badCase{"unknown window size", codes.InvalidArgument, sizeField, []string{`"default"`, "no window size 2s", "configured: 1s, 1m0s"}}, with(func(t *target) { t.size = dur(2 * time.Second) })},
		{badCase{"sub-millisecond window size", codes.InvalidArgument, sizeField, []string{"no window size 1.5s"}}, with(func(t *target) { t.size = dur(1500 * time.Millisecond) })},
		{badCase{"negative window size", codes.InvalidArgument, sizeField, []string{"must be positive"}}, with(func(t *target) { t.size = dur(-time.Second) })},
		{badCase{"malformed window size", codes.InvalidArgument, sizeField, nil}, with(func(t *target) { t.size = &durationpb.Duration{Seconds: 1, Nanos: -1} })},
		{badCase{"at before now - largest window", codes.InvalidArgument, "at", []string{"must be within [now - 1m0s, now + 1s]"}}, with(func(t *target) { t.at = ts(badNow.Add(-time.Minute - time.Nanosecond)) })},
		{badCase{"at after now + 1s", codes.InvalidArgument, "at", []string{"must be within"}}, with(func(t *target) { t.at = ts(badNow.Add(time.Second + time.Nanosecond)) })},
		{badCase{"at far future", codes.InvalidArgument, "at", []string{"must be within"}}, with(func(t *target) { t.at = ts(badNow.Add(24 * time.Hour)) })},
		{badCase{"malformed at", codes.InvalidArgument, "at", nil}, with(func(t *target) { t.at = &timestamppb.Timestamp{Seconds: badNow.Unix(), Nanos: 1e9} })},
	}
}

// badValues are the malformed hit counts, for the field named.
func badValues(field string) []struct {
	badCase
	v float64
} {
	type c = struct {
		badCase
		v float64
	}
	return []c{
		{badCase{"NaN", codes.InvalidArgument, field, []string{"finite"}}, math.NaN()},
		{badCase{"+Inf", codes.InvalidArgument, field, []string{"finite"}}, math.Inf(1)},
		{badCase{"-Inf", codes.InvalidArgument, field, []string{"finite"}}, math.Inf(-1)},
		{badCase{"above 1e9", codes.InvalidArgument, field, []string{"at most 1e+09"}}, 1e9 + 1},
		{badCase{"below -1e9", codes.InvalidArgument, field, []string{"at most 1e+09"}}, -1e9 - 1},
		{badCase{"max float", codes.InvalidArgument, field, []string{"at most 1e+09"}}, math.MaxFloat64},
	}
}

// checkRejected runs a rejected request through the unary call and, where
// there is one, as the middle item of a batch between two good items: the
// unary call fails with the case's status; the batch succeeds, the bad item
// carrying the very status the unary call returned and the good items
// served. Nothing of the bad request may be counted.
func checkRejected(t *testing.T, c badCase, unary func(*testServer) error, batch func(*testServer) (*status.Status, int, error), countedKey string) {
	t.Helper()
	s := newTestServer(t, fakeclock.New(badNow))
	unaryErr := unary(s)
	checkStatus(t, unaryErr, c.code, c.field, c.contains...)
	if n := s.activeKeys(); n != 0 {
		t.Errorf("active keys = %d after the rejected call, want 0", n)
	}
	if batch != nil {
		itemErr, served, err := batch(s)
		if err != nil {
			t.Fatalf("batch: %v", err)
		}
		if want := status.Convert(unaryErr).Proto(); !proto.Equal(itemErr.Proto(), want) {
			t.Errorf("batch item error = %v\nunary error      = %v", itemErr.Proto(), want)
		}
		if served != 2 {
			t.Errorf("%d good batch items served, want 2", served)
		}
		if n := s.activeKeys(); n != 1 {
			t.Errorf("active keys = %d after the batch, want 1 (the good items' key)", n)
		}
		if got := s.rates(t, "", "good", nil); !equalRates(got, []rate{{time.Second, 2}, {time.Minute, 2}}) {
			t.Errorf("good items: %v, want 2 each", got)
		}
	}
	if countedKey != "" {
		s.checkUncounted(t, "", countedKey)
	}
}

func TestIncrementRejects(t *testing.T) {
	goodItem := &limiterv1.IncrementRequest{Key: "good"}
	run := func(t *testing.T, c badCase, req *limiterv1.IncrementRequest) {
		key := ""
		if req.GetNamespace() == "" && req.GetKey() != "" && len(req.GetKey()) <= 1024 {
			key = req.GetKey()
		}
		checkRejected(t, c,
			func(s *testServer) error { _, err := s.client.Increment(bg, req); return err },
			func(s *testServer) (*status.Status, int, error) {
				resp, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: []*limiterv1.IncrementRequest{goodItem, req, goodItem}})
				if err != nil {
					return nil, 0, err
				}
				r := resp.GetResults()
				served := 0
				for _, i := range []int{0, 2} {
					if r[i].GetResponse() != nil && r[i].GetError() == nil {
						served++
					}
				}
				if r[1].GetResponse() != nil {
					t.Errorf("bad item has a response too: %v", r[1])
				}
				return status.FromProto(r[1].GetError()), served, nil
			}, key)
	}
	for _, c := range badTargets("window_size") {
		t.Run(c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.IncrementRequest{Namespace: c.namespace, Key: c.key, WindowSize: c.size, At: c.at, Value: f64(5)})
		})
	}
	for _, c := range badValues("value") {
		t.Run("value "+c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.IncrementRequest{Key: "k", Value: f64(c.v)})
		})
	}
}

func TestSlidingWindowRejects(t *testing.T) {
	run := func(t *testing.T, c badCase, req *limiterv1.SlidingWindowRequest) {
		checkRejected(t, c, func(s *testServer) error { _, err := s.client.SlidingWindow(bg, req); return err }, nil, "")
	}
	for _, c := range badTargets("window_size") {
		t.Run(c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.SlidingWindowRequest{Namespace: c.namespace, Key: c.key, WindowSize: c.size, At: c.at})
		})
	}
	for _, c := range badValues("cur_diff") {
		t.Run("cur_diff "+c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.SlidingWindowRequest{Key: "k", CurDiff: f64(c.v)})
		})
	}
}

func TestAllowRejects(t *testing.T) {
	lim := func(d time.Duration, l float64) *limiterv1.Limit {
		return &limiterv1.Limit{WindowSize: dur(d), Limit: l}
	}
	goodItem := &limiterv1.AllowRequest{Key: "good", Limits: []*limiterv1.Limit{lim(time.Second, 10)}}
	run := func(t *testing.T, c badCase, req *limiterv1.AllowRequest) {
		key := ""
		if req.GetNamespace() == "" && req.GetKey() != "" && len(req.GetKey()) <= 1024 {
			key = req.GetKey()
		}
		checkRejected(t, c,
			func(s *testServer) error { _, err := s.client.Allow(bg, req); return err },
			func(s *testServer) (*status.Status, int, error) {
				resp, err := s.client.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{goodItem, req, goodItem}})
				if err != nil {
					return nil, 0, err
				}
				r := resp.GetResults()
				served := 0
				for _, i := range []int{0, 2} {
					if r[i].GetResponse().GetAllowed() && r[i].GetError() == nil {
						served++
					}
				}
				if r[1].GetResponse() != nil {
					t.Errorf("bad item has a response too: %v", r[1])
				}
				return status.FromProto(r[1].GetError()), served, nil
			}, key)
	}
	for _, c := range badTargets("limits[0].window_size") {
		t.Run(c.name, func(t *testing.T) {
			size := c.size
			if size == nil {
				size = dur(time.Second)
			}
			run(t, c.badCase, &limiterv1.AllowRequest{Namespace: c.namespace, Key: c.key, At: c.at, Limits: []*limiterv1.Limit{{WindowSize: size, Limit: 100}}})
		})
	}
	for _, c := range badValues("cost") {
		t.Run("cost "+c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.AllowRequest{Key: "k", Cost: f64(c.v), Limits: []*limiterv1.Limit{lim(time.Second, 100)}})
		})
	}
	seventeen := make([]*limiterv1.Limit, 17)
	for i := range seventeen {
		seventeen[i] = lim(time.Second, 1)
	}
	for _, c := range []struct {
		badCase
		cost   *float64
		limits []*limiterv1.Limit
	}{
		{badCase{"negative cost", codes.InvalidArgument, "cost", []string{"must not be negative", "-1"}}, f64(-1), []*limiterv1.Limit{lim(time.Second, 100)}},
		{badCase{"tiny negative cost", codes.InvalidArgument, "cost", []string{"must not be negative"}}, f64(-0.000001), []*limiterv1.Limit{lim(time.Second, 100)}},
		{badCase{"no limits", codes.InvalidArgument, "limits", []string{"at least one limit"}}, nil, nil},
		{badCase{"17 limits", codes.InvalidArgument, "limits", []string{"at most 16 limits", "got 17"}}, nil, seventeen},
		{badCase{"duplicate window size", codes.InvalidArgument, "limits[2].window_size", []string{"1s given twice"}}, nil,
			[]*limiterv1.Limit{lim(time.Second, 5), lim(time.Minute, 50), lim(time.Second, 7)}},
		{badCase{"limit without window size", codes.InvalidArgument, "limits[1].window_size", []string{"is required"}}, nil,
			[]*limiterv1.Limit{lim(time.Second, 5), {Limit: 5}}},
		{badCase{"second limit's unknown size", codes.InvalidArgument, "limits[1].window_size", []string{"configured: 1s, 1m0s"}}, nil,
			[]*limiterv1.Limit{lim(time.Second, 5), lim(time.Hour, 5)}},
		{badCase{"negative limit", codes.InvalidArgument, "limits[0].limit", []string{"between 0 and 1e+09", "got -1"}}, nil, []*limiterv1.Limit{lim(time.Second, -1)}},
		{badCase{"NaN limit", codes.InvalidArgument, "limits[0].limit", []string{"got NaN"}}, nil, []*limiterv1.Limit{lim(time.Second, math.NaN())}},
		{badCase{"Inf limit", codes.InvalidArgument, "limits[0].limit", []string{"got +Inf"}}, nil, []*limiterv1.Limit{lim(time.Second, math.Inf(1))}},
		{badCase{"limit above 1e9", codes.InvalidArgument, "limits[1].limit", []string{"between 0 and 1e+09"}}, nil,
			[]*limiterv1.Limit{lim(time.Second, 1), lim(time.Minute, 2e9)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run(t, c.badCase, &limiterv1.AllowRequest{Key: "k", Cost: c.cost, Limits: c.limits})
		})
	}
}

// rawCodec sends and receives pre-encoded bytes, as a client in a language
// whose protobuf library does not check UTF-8 would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestInvalidUTF8Key: a key that is not UTF-8 is refused and counts
// nothing. The Go protobuf runtime refuses it before the server's code runs
// (proto3 strings must be UTF-8), so over the wire it is gRPC's own
// unmarshal error; the adapter itself answers INVALID_ARGUMENT on "key".
func TestInvalidUTF8Key(t *testing.T) {
	s := newTestServer(t, fakeclock.New(badNow))
	key := "k\xff"
	// Over the wire: the raw encoding of IncrementRequest{key: "k\xff"}.
	raw := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), key)
	for _, method := range []string{"Increment", "SlidingWindow", "Allow"} {
		var out []byte
		err := s.conn.Invoke(bg, "/limiter.v1.RateLimiter/"+method, raw, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) == codes.OK {
			t.Errorf("%s with a non-UTF-8 key over the wire: OK, want an error", method)
		}
		t.Logf("%s over the wire: %v", method, err)
	}
	// The adapter, as reached by a decoder that does not check UTF-8.
	_, err := s.srv.Increment(bg, &limiterv1.IncrementRequest{Key: key})
	checkStatus(t, err, codes.InvalidArgument, "key", "valid UTF-8")
	_, err = s.srv.SlidingWindow(bg, &limiterv1.SlidingWindowRequest{Key: key})
	checkStatus(t, err, codes.InvalidArgument, "key", "valid UTF-8")
	_, err = s.srv.Allow(bg, &limiterv1.AllowRequest{Key: key, Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 5}}})
	checkStatus(t, err, codes.InvalidArgument, "key", "valid UTF-8")
	ab, err := s.srv.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{{Key: key, Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 5}}}}})
	if err != nil || codes.Code(ab.GetResults()[0].GetError().GetCode()) != codes.InvalidArgument {
		t.Errorf("AllowBatch item with a non-UTF-8 key: %v, %v", ab, err)
	}
	if n := s.activeKeys(); n != 0 {
		t.Errorf("active keys = %d, want 0", n)
	}
}

// TestOversizeMessage: a request over MaxRecvMsgSize is refused with
// RESOURCE_EXHAUSTED and counts nothing; one just under it is served.
func TestOversizeMessage(t *testing.T) {
	s := newTestServer(t, fakeclock.New(badNow))
	// One Increment item whose key alone exceeds the limit.
	big := strings.Repeat("k", MaxRecvMsgSize+1)
	_, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Key: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Increment of %d bytes: %v, want RESOURCE_EXHAUSTED", len(big), err)
	}
	// A full batch of the most items with long keys fits.
	items := make([]*limiterv1.IncrementRequest, service.MaxBatchItems)
	for i := range items {
		items[i] = &limiterv1.IncrementRequest{Key: fmt.Sprintf("%0512d", i)}
	}
	resp, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: items})
	if err != nil {
		t.Fatalf("IncrementBatch of %d items with 512-byte keys: %v", len(items), err)
	}
	if n := len(resp.GetResults()); n != service.MaxBatchItems {
		t.Fatalf("%d results, want %d", n, service.MaxBatchItems)
	}
}

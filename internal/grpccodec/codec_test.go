package grpccodec_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/grpccodec"
)

var _ encoding.CodecV2 = grpccodec.Codec{}

func allowBatch(items int) *limiterv1.AllowBatchRequest {
	cost := 2.5
	req := &limiterv1.AllowBatchRequest{}
	for i := range items {
		req.Items = append(req.Items, &limiterv1.AllowRequest{
			Namespace: "api", Key: "user-" + strconv.Itoa(i), Cost: &cost, CountRejected: i%2 == 0,
			Limits: []*limiterv1.Limit{
				{WindowSize: durationpb.New(time.Second), Limit: 10},
				{WindowSize: durationpb.New(time.Minute), Limit: 1e9},
			},
			At: timestamppb.New(time.Unix(1_700_000_000, 123_456_789)),
		})
	}
	return req
}

func allowBatchResponse(t *testing.T) *limiterv1.AllowBatchResponse {
	detail, err := anypb.New(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "key", Description: "must not be empty"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &limiterv1.AllowBatchResponse{Results: []*limiterv1.AllowResult{
		{Response: &limiterv1.AllowResponse{Allowed: true, Limits: []*limiterv1.LimitStatus{{
			WindowSize: durationpb.New(time.Second), Limit: 10, Rate: 3.5, Remaining: 6.5, ResetAfter: durationpb.New(250 * time.Millisecond)}}}},
		{Response: &limiterv1.AllowResponse{Never: true, Reason: "cost 20 exceeds limit 10 of window 1s"}},
		{Response: &limiterv1.AllowResponse{RetryAfter: durationpb.New(1500 * time.Millisecond)}},
		{Error: &rpcstatus.Status{Code: 3, Message: "key: must not be empty", Details: []*anypb.Any{detail}}},
	}}
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	out, err := grpccodec.Codec{}.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%T): %v", v, err)
	}
	defer out.Free()
	return out.Materialize()
}

// TestRoundTrip: the fast path writes the bytes google.golang.org/protobuf
// writes, and reads back what was written, however gRPC cuts the bytes up.
func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  proto.Message
		new  func() proto.Message
	}{
		{"AllowBatchRequest", allowBatch(3), func() proto.Message { return new(limiterv1.AllowBatchRequest) }},
		{"AllowBatchResponse", allowBatchResponse(t), func() proto.Message { return new(limiterv1.AllowBatchResponse) }},
		{"IncrementRequest", &limiterv1.IncrementRequest{Key: "k", WindowSize: durationpb.New(time.Minute), Value: proto.Float64(-3)},
			func() proto.Message { return new(limiterv1.IncrementRequest) }},
		// Above gRPC's pooling threshold: encoded into a pooled buffer.
		{"large AllowBatchRequest", allowBatch(2000), func() proto.Message { return new(limiterv1.AllowBatchRequest) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := proto.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			got := marshal(t, c.msg)
			if !bytes.Equal(got, want) {
				t.Fatalf("Marshal: %d bytes differing from proto.Marshal's %d", len(got), len(want))
			}
			for _, pieces := range []int{1, 3} {
				var data mem.BufferSlice
				for i := range pieces {
					data = append(data, mem.SliceBuffer(got[i*len(got)/pieces:(i+1)*len(got)/pieces]))
				}
				back := c.new()
				if err := (grpccodec.Codec{}).Unmarshal(data, back); err != nil {
					t.Fatalf("Unmarshal of %d pieces: %v", pieces, err)
				}
				if !proto.Equal(back, c.msg) {
					t.Errorf("Unmarshal of %d pieces: got %v, want %v", pieces, back, c.msg)
				}
			}
		})
	}
}

// TestUnmarshalReplaces: as with proto.Unmarshal, decoding into a message
// that holds something leaves only what was decoded.
func TestUnmarshalReplaces(t *testing.T) {
	msg := &limiterv1.AllowBatchRequest{Items: allowBatch(1).Items[:1]}
	into := allowBatch(5)
	if err := (grpccodec.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(marshal(t, msg))}, into); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(into, msg) {
		t.Errorf("got %d items, want the 1 decoded", len(into.GetItems()))
	}
	// An empty message is no bytes at all.
	if err := (grpccodec.Codec{}).Unmarshal(nil, into); err != nil || len(into.GetItems()) != 0 {
		t.Errorf("Unmarshal of no bytes: %d items, %v; want none", len(into.GetItems()), err)
	}
}

// TestFallback: messages without vtprotobuf methods go through
// google.golang.org/protobuf, APIv1 messages included.
func TestFallback(t *testing.T) {
	msg := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	if _, fast := any(msg).(interface{ UnmarshalVT([]byte) error }); fast {
		t.Fatal("HealthCheckResponse has UnmarshalVT: pick another message to test the fallback")
	}
	want, _ := proto.Marshal(msg)
	for _, v := range []any{msg, protoadapt.MessageV1Of(msg)} {
		if got := marshal(t, v); !bytes.Equal(got, want) {
			t.Errorf("Marshal(%T) = %x, want %x", v, got, want)
		}
	}
	back := new(healthpb.HealthCheckResponse)
	if err := (grpccodec.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil || !proto.Equal(back, msg) {
		t.Errorf("Unmarshal = %v, %v; want %v", back, err, msg)
	}
	// A field of the wrong wire type is refused here too.
	bad := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 100)
	if err := (grpccodec.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, new(healthpb.HealthCheckResponse)); err == nil {
		t.Error("Unmarshal of a truncated message: no error")
	}
}

// TestNotAMessage: values that are not protobuf messages are refused.
func TestNotAMessage(t *testing.T) {
	var c grpccodec.Codec
	for _, v := range []any{nil, "text", struct{}{}, new([]byte)} {
		if _, err := c.Marshal(v); err == nil || !strings.Contains(err.Error(), "not a protobuf message") {
			t.Errorf("Marshal(%T): %v, want a not-a-message error", v, err)
		}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{8, 1})}, v); err == nil || !strings.Contains(err.Error(), "not a protobuf message") {
			t.Errorf("Unmarshal(%T): %v, want a not-a-message error", v, err)
		}
	}
	if c.Name() != "proto" {
		t.Errorf("Name() = %q, want proto", c.Name())
	}
}

// TestSameVerdicts: the codec accepts and refuses what
// google.golang.org/protobuf does, with the same result or error, where
// vtprotobuf alone would not.
func TestSameVerdicts(t *testing.T) {
	good := marshal(t, &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{{Limit: 1}}})
	tag := protowire.AppendTag
	for _, c := range []struct {
		name   string
		b      []byte
		refuse bool
	}{
		{"good", good, false},
		{"truncated", good[:len(good)-3], true},
		// An unknown field to google.golang.org/protobuf, an error to
		// vtprotobuf.
		{"known field of the wrong wire type", protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1), false},
		{"unknown field", protowire.AppendString(tag(good, 99, protowire.BytesType), "x"), false},
		// Accepted by vtprotobuf, refused by google.golang.org/protobuf.
		{"key not UTF-8", protowire.AppendString(tag(nil, 2, protowire.BytesType), "k\xff"), true},
		{"namespace not UTF-8", protowire.AppendString(tag(good, 1, protowire.BytesType), "\xc3"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := new(limiterv1.AllowRequest)
			werr := proto.Unmarshal(c.b, want)
			if (werr != nil) != c.refuse {
				t.Fatalf("proto.Unmarshal: %v; this case expects refused = %v", werr, c.refuse)
			}
			got := allowBatch(1).Items[0] // not empty: Unmarshal must replace it
			err := grpccodec.Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(c.b)}, got)
			switch {
			case c.refuse && (err == nil || err.Error() != werr.Error()):
				t.Errorf("Unmarshal: %v, want %v", err, werr)
			case !c.refuse && (err != nil || !proto.Equal(got, want)):
				t.Errorf("Unmarshal: %v, %v; want %v", got, err, want)
			}
		})
	}
}

// TestMarshalInvalidUTF8: a string that is not UTF-8 is refused, as
// proto.Marshal refuses it.
func TestMarshalInvalidUTF8(t *testing.T) {
	for _, msg := range []proto.Message{
		&limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{{Key: "ok"}, {Key: "k\xff"}}},
		&limiterv1.AllowBatchResponse{Results: []*limiterv1.AllowResult{{Response: &limiterv1.AllowResponse{Reason: "\xff"}}}},
	} {
		_, perr := proto.Marshal(msg)
		if _, err := (grpccodec.Codec{}).Marshal(msg); err == nil || perr == nil || err.Error() != perr.Error() {
			t.Errorf("Marshal(%T): %v, want %v", msg, err, perr)
		}
	}
}

package main

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestBatchReply: what limiter-bench reads of batch responses, however
// gRPC cuts their bytes up.
func TestBatchReply(t *testing.T) {
	limits := []*limiterv1.LimitStatus{{WindowSize: durationpb.New(time.Second), Limit: 5, Rate: 5, ResetAfter: durationpb.New(time.Millisecond)}}
	allow := &limiterv1.AllowBatchResponse{Results: []*limiterv1.AllowResult{
		{Response: &limiterv1.AllowResponse{Allowed: true, Limits: limits}},
		{Response: &limiterv1.AllowResponse{Limits: limits, RetryAfter: durationpb.New(time.Second)}},
		{Error: &rpcstatus.Status{Code: 8, Message: "full"}},
		{Response: &limiterv1.AllowResponse{Never: true, Reason: "too dear"}},
		{Error: &rpcstatus.Status{}},
		{Response: &limiterv1.AllowResponse{Allowed: true}},
	}}
	rates := []*limiterv1.WindowRate{{WindowSize: durationpb.New(time.Second), Rate: 3}}
	inc := &limiterv1.IncrementBatchResponse{Results: []*limiterv1.IncrementResult{
		{Response: &limiterv1.IncrementResponse{Rates: rates}},
		{Error: &rpcstatus.Status{Code: 3, Message: "key: must not be empty"}},
		{Response: &limiterv1.IncrementResponse{}},
	}}
	encode := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// An unknown field in the response and in a result, as a newer server
	// might send.
	unknown := protowire.AppendString(protowire.AppendTag(encode(allow), 7, protowire.BytesType), "later")
	unknown = protowire.AppendBytes(protowire.AppendTag(unknown, 1, protowire.BytesType),
		protowire.AppendVarint(protowire.AppendTag(encode(allow.Results[0]), 9, protowire.VarintType), 1))
	for _, c := range []struct {
		name string
		b    []byte
		want []itemResult
	}{
		{"AllowBatch", encode(allow), []itemResult{{allowed: true}, {}, {failed: true, code: 8}, {}, {failed: true}, {allowed: true}}},
		{"IncrementBatch", encode(inc), []itemResult{{}, {failed: true, code: 3}, {}}},
		{"unknown fields", unknown, []itemResult{{allowed: true}, {}, {failed: true, code: 8}, {}, {failed: true}, {allowed: true}, {allowed: true}}},
		{"empty", nil, []itemResult{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r batchReply
			for _, pieces := range []int{1, 3, 1} { // the last one reusing what the others left
				var data mem.BufferSlice
				for i := range pieces {
					data = append(data, mem.SliceBuffer(c.b[i*len(c.b)/pieces:(i+1)*len(c.b)/pieces]))
				}
				if err := (codec{}).Unmarshal(data, &r); err != nil {
					t.Fatalf("%d pieces: %v", pieces, err)
				}
				if got := r.results; !reflect.DeepEqual(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
					t.Errorf("%d pieces: got %+v, want %+v", pieces, got, c.want)
				}
			}
		})
	}
	var r batchReply
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(encode(allow)[:20])}, &r); err == nil {
		t.Error("truncated response: no error")
	}
	// Other messages are decoded as messages.
	var resp limiterv1.AllowResponse
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(encode(allow.Results[0].Response))}, &resp); err != nil || !proto.Equal(&resp, allow.Results[0].Response) {
		t.Errorf("AllowResponse: %v, %v", &resp, err)
	}
}

// TestAllowReply: what limiter-bench reads of an Allow response, however
// gRPC cuts its bytes up, reusing one reply call after call.
func TestAllowReply(t *testing.T) {
	limits := []*limiterv1.LimitStatus{{WindowSize: durationpb.New(time.Second), Limit: 5, Rate: 5, ResetAfter: durationpb.New(time.Millisecond)}}
	allowed, err := proto.Marshal(&limiterv1.AllowResponse{Allowed: true, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	denied, err := proto.Marshal(&limiterv1.AllowResponse{Limits: limits, RetryAfter: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// A newer server's unknown field after allowed.
	unknown := protowire.AppendString(protowire.AppendTag(allowed, 9, protowire.BytesType), "later")
	var r allowReply
	for _, c := range []struct {
		name   string
		b      []byte
		pieces int
		want   bool
	}{
		{"allowed", allowed, 1, true},
		{"denied after allowed", denied, 1, false},
		{"allowed in pieces", allowed, 3, true},
		{"denied in pieces", denied, 4, false},
		{"unknown field", unknown, 2, true},
		{"empty", nil, 1, false},
	} {
		var data mem.BufferSlice
		for i := range c.pieces {
			data = append(data, mem.SliceBuffer(c.b[i*len(c.b)/c.pieces:(i+1)*len(c.b)/c.pieces]))
		}
		if err := (codec{}).Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.allowed != c.want {
			t.Errorf("%s: allowed %v, want %v", c.name, r.allowed, c.want)
		}
	}
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(allowed[:len(allowed)-3])}, &r); err == nil {
		t.Error("truncated response: no error")
	}
}

// TestBatchRequest: a batch request written from prebuilt items is the
// batch message's encoding.
func TestBatchRequest(t *testing.T) {
	limits := []*limiterv1.Limit{{WindowSize: durationpb.New(time.Second), Limit: 1e9}}
	a := &limiterv1.AllowRequest{Namespace: "api", Key: "k1", Limits: limits}
	b := &limiterv1.AllowRequest{Key: "k2", Limits: limits}
	var items [][]byte
	for _, m := range []proto.Message{a, b} {
		enc, err := encodeItem(m)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, enc)
	}
	want, err := proto.Marshal(&limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{a, b, a}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := codec{}.Marshal(&batchRequest{items: [][]byte{items[0], items[1], items[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Errorf("encoded %x, want %x", got, want)
	}
	// Other messages are encoded as messages.
	out, err = codec{}.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	if want, _ := proto.Marshal(a); !bytes.Equal(out.Materialize(), want) {
		t.Errorf("AllowRequest encoded %x, want %x", out.Materialize(), want)
	}
}

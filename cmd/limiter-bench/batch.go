package main

import (
	"errors"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/limiterd/limiterd/internal/grpccodec"
)

// codec is grpccodec's, except that it writes a batchRequest from its
// items' encodings and reads batch responses into a batchReply:
// limiter-bench needs only each item's error code and verdict, and encoding
// and decoding every item as a message would cost it about as much CPU as
// the server spends deciding the item, on the same cores.
type codec struct{ grpccodec.Codec }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*batchRequest); ok {
		return r.encode(), nil
	}
	return c.Codec.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch r := v.(type) {
	case *batchReply:
		return r.read(data)
	case *allowReply:
		return r.read(data)
	}
	return c.Codec.Unmarshal(data, v)
}

// allowReply is an AllowResponse as limiter-bench reads it: only whether
// the call was allowed. Decoding the limits' statuses, durations and all,
// would cost the tool CPU that the server it measures shares.
type allowReply struct {
	allowed bool
	buf     []byte // the response's bytes, when gRPC hands them in pieces
}

func (r *allowReply) read(data mem.BufferSlice) error {
	r.allowed = false
	return eachField(contiguous(data, &r.buf), func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == fieldAllowed && typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(v)
			r.allowed = x != 0
		}
		return nil
	})
}

// batchRequest is an AllowBatchRequest or IncrementBatchRequest as the
// encodings of its items, each a field 1 (items) of the batch message.
// Those are prebuilt once per key (see encodeItem), and a caller reuses its
// batchRequest call after call.
type batchRequest struct {
	items [][]byte
}

// encode concatenates the items' encodings, in a buffer that gRPC returns
// to its pool once sent.
func (r *batchRequest) encode() mem.BufferSlice {
	n := 0
	for _, it := range r.items {
		n += len(it)
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	b := (*buf)[:0]
	for _, it := range r.items {
		b = append(b, it...)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}
}

// encodeItem encodes m as an item of a batch request.
func encodeItem(m proto.Message) ([]byte, error) {
	b, err := grpccodec.Codec{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	defer b.Free()
	return protowire.AppendBytes(protowire.AppendTag(nil, fieldItems, protowire.BytesType), b.Materialize()), nil
}

// batchReply is an AllowBatchResponse or IncrementBatchResponse as
// limiter-bench reads it. A caller reuses its own, call after call.
type batchReply struct {
	results []itemResult
	buf     []byte // the response's bytes, when gRPC hands them in pieces
}

// itemResult is one AllowResult or IncrementResult.
type itemResult struct {
	failed  bool  // the error field is set
	code    int32 // its gRPC code
	allowed bool  // AllowResponse.allowed
}

// Field numbers, from limiter.proto and google/rpc/status.proto: items
// (in both batch requests), results (in both batch responses), response and
// error (in both results), allowed (AllowResponse) and code (Status).
const (
	fieldItems    = 1
	fieldResults  = 1
	fieldResponse = 1
	fieldError    = 2
	fieldAllowed  = 1
	fieldCode     = 1
)

func (r *batchReply) read(data mem.BufferSlice) error {
	r.results = r.results[:0]
	return eachField(contiguous(data, &r.buf), func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != fieldResults || typ != protowire.BytesType {
			return nil
		}
		var res itemResult
		err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == fieldResponse && typ == protowire.BytesType:
				// A message field given twice is merged: the last
				// allowed seen wins.
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num == fieldAllowed && typ == protowire.VarintType {
						x, _ := protowire.ConsumeVarint(v)
						res.allowed = x != 0
					}
					return nil
				})
			case num == fieldError && typ == protowire.BytesType:
				res.failed = true
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num == fieldCode && typ == protowire.VarintType {
						x, _ := protowire.ConsumeVarint(v)
						res.code = int32(x)
					}
					return nil
				})
			}
			return nil
		})
		r.results = append(r.results, res)
		return err
	})
}

// contiguous returns the bytes of data in one slice: its only buffer's,
// or else copied into *buf, which keeps the room for the next response.
func contiguous(data mem.BufferSlice, buf *[]byte) []byte {
	if len(data) == 1 {
		return data[0].ReadOnlyData()
	}
	b := (*buf)[:0]
	for _, d := range data {
		b = append(b, d.ReadOnlyData()...)
	}
	*buf = b
	return b
}

var errMalformed = errors.New("limiter-bench: malformed batch response")

// eachField calls f with every field of the encoded message b: its number,
// wire type and value (a varint's bytes, or a length-delimited field's
// contents).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return errMalformed
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

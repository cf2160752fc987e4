// Package grpccodec is a gRPC codec for protobuf messages that uses the
// reflection-free methods vtprotobuf generates (SizeVT,
// MarshalToSizedBufferVT, UnmarshalVT) when a message has them, and
// google.golang.org/protobuf otherwise. The fast path is only taken where
// it gives google.golang.org/protobuf's result: whatever it refuses (a
// malformed message, a string that is not UTF-8) is handed to
// google.golang.org/protobuf, which accepts or refuses it as it always
// does. The bytes on the wire are the same either way, so the codec's name
// is gRPC's default "proto" and peers see no difference.
//
// It is not registered globally: a server takes it with
// grpc.ForceServerCodecV2(grpccodec.Codec{}), a client with
// grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpccodec.Codec{})).
package grpccodec

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Name is the codec's content subtype: gRPC's own protobuf codec's.
const Name = "proto"

// Codec is an encoding.CodecV2. Its zero value is ready to use, and it has
// no state, so it is safe for concurrent use.
type Codec struct{}

// vtMarshaler and vtUnmarshaler are what vtprotobuf's marshal, size and
// unmarshal features generate.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

type vtUnmarshaler interface {
	UnmarshalVT([]byte) error
}

// utf8Validator is implemented by messages with string fields: vtprotobuf,
// unlike google.golang.org/protobuf, does not check that proto3 strings are
// valid UTF-8.
type utf8Validator interface {
	ValidUTF8() bool
}

// resetter is the Reset method of every generated message.
type resetter interface {
	Reset()
}

// Name returns "proto".
func (Codec) Name() string { return Name }

// Marshal encodes v. Messages above gRPC's pooling threshold are encoded
// into a buffer from gRPC's default pool, which gRPC returns to it once
// the bytes are sent.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok || !validUTF8(v) {
		return marshalProto(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if err := marshalInto(m, buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if err := marshalInto(m, *buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// marshalInto fills buf, which is exactly m's size: vtprotobuf writes from
// the end backwards, so a message that changed size between SizeVT and the
// write would leave a gap at the start.
func marshalInto(m vtMarshaler, buf []byte) error {
	n, err := m.MarshalToSizedBufferVT(buf)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("grpccodec: %T encoded to %d bytes, sized at %d: modified while being marshalled?", m, n, len(buf))
	}
	return nil
}

// Unmarshal decodes data into v, replacing what v held, as proto.Unmarshal
// does. v keeps no reference to data (strings and bytes are copied), so
// gRPC may reuse data's buffers afterwards.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtUnmarshaler)
	if !ok {
		return unmarshalProto(data, v)
	}
	reset(v)
	var b []byte
	if len(data) == 1 {
		// The usual case: decode in place rather than copy into one buffer.
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	if err := m.UnmarshalVT(b); err == nil && validUTF8(v) {
		return nil
	}
	// vtprotobuf refuses some messages google.golang.org/protobuf accepts
	// (a known field of the wrong wire type is an unknown field to the
	// latter) and accepts strings it refuses: its verdict stands.
	reset(v)
	return unmarshalProto(data, v)
}

func reset(v any) {
	if r, ok := v.(resetter); ok {
		r.Reset()
	}
}

func validUTF8(v any) bool {
	u, ok := v.(utf8Validator)
	return !ok || u.ValidUTF8()
}

// marshalProto and unmarshalProto are gRPC's own protobuf codec, for
// messages without vtprotobuf methods (health checks, reflection).
func marshalProto(v any) (mem.BufferSlice, error) {
	m := messageV2Of(v)
	if m == nil {
		return nil, fmt.Errorf("grpccodec: cannot marshal %T: not a protobuf message", v)
	}
	// UseCachedSize reuses the size just computed, rather than sizing
	// every nested message a second time.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func unmarshalProto(data mem.BufferSlice, v any) error {
	m := messageV2Of(v)
	if m == nil {
		return fmt.Errorf("grpccodec: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func messageV2Of(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

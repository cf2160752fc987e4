package limiterv1_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/grpccodec"
)

// messages are the message types of limiter.proto, as their Go types.
func messages(t *testing.T) []protoreflect.MessageType {
	t.Helper()
	var out []protoreflect.MessageType
	mds := limiterv1.File_limiter_v1_limiter_proto.Messages()
	for i := range mds.Len() {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(mds.Get(i).FullName())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, mt)
	}
	return out
}

// populate sets every field of m, recursively, to a value that is not the
// default, lists to two elements; n makes the values differ.
func populate(t *testing.T, m protoreflect.Message, n *int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.IsMap() {
			t.Fatalf("%s: maps are not populated", fd.FullName())
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for range 2 {
				l.Append(value(t, fd, l.NewElement(), n))
			}
			continue
		}
		m.Set(fd, value(t, fd, m.NewField(fd), n))
	}
}

func value(t *testing.T, fd protoreflect.FieldDescriptor, zero protoreflect.Value, n *int) protoreflect.Value {
	*n++
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-*n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(*n) << 40)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(*n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(*n) << 40)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(*n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(*n) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s€" + string(rune('a'+*n%26)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(*n), 0, 0xff})
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.MessageKind:
		populate(t, zero.Message(), n)
		return zero
	}
	t.Fatalf("%s: kind %v is not populated", fd.FullName(), fd.Kind())
	return zero
}

type vtMessage interface {
	MarshalVT() ([]byte, error)
	UnmarshalVT([]byte) error
}

// TestVTMatchesProto: for every message with every field set, well-known
// types and google.rpc.Status (with its Any details) included, vtprotobuf
// writes the bytes google.golang.org/protobuf writes and reads back the
// same message.
func TestVTMatchesProto(t *testing.T) {
	for _, mt := range messages(t) {
		t.Run(string(mt.Descriptor().Name()), func(t *testing.T) {
			var n int
			m := mt.New()
			populate(t, m, &n)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Interface())
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Interface().(vtMessage).MarshalVT()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("MarshalVT = %x, %v\nwant       %x", got, err, want)
			}
			back := mt.New().Interface()
			if err := back.(vtMessage).UnmarshalVT(want); err != nil || !proto.Equal(back, m.Interface()) {
				t.Errorf("UnmarshalVT = %v, %v\nwant %v", back, err, m.Interface())
			}
		})
	}
}

// stringPaths returns the paths from md to every string field reachable
// through message fields.
func stringPaths(md protoreflect.MessageDescriptor, depth int) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	if depth == 0 {
		return nil
	}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		switch fd.Kind() {
		case protoreflect.StringKind:
			out = append(out, []protoreflect.FieldDescriptor{fd})
		case protoreflect.MessageKind:
			for _, p := range stringPaths(fd.Message(), depth-1) {
				out = append(out, append([]protoreflect.FieldDescriptor{fd}, p...))
			}
		}
	}
	return out
}

// TestValidUTF8Complete: for every string field of every message, nested
// ones included, a value that is not UTF-8 is refused through the codec
// exactly as google.golang.org/protobuf refuses it, both ways; a string
// field the ValidUTF8 methods miss fails here.
func TestValidUTF8Complete(t *testing.T) {
	const bad = "ok\xff"
	var codec grpccodec.Codec
	for _, mt := range messages(t) {
		for _, path := range stringPaths(mt.Descriptor(), 8) {
			name := string(mt.Descriptor().Name())
			for _, fd := range path {
				name += "." + string(fd.Name())
			}
			t.Run(name, func(t *testing.T) {
				// The message holding only the bad string, built and encoded
				// from the inside out.
				last := path[len(path)-1]
				enc := protowire.AppendString(protowire.AppendTag(nil, last.Number(), protowire.BytesType), bad)
				for i := len(path) - 2; i >= 0; i-- {
					enc = protowire.AppendBytes(protowire.AppendTag(nil, path[i].Number(), protowire.BytesType), enc)
				}
				m := mt.New()
				cur := m
				for _, fd := range path[:len(path)-1] {
					if fd.IsList() {
						cur = cur.Mutable(fd).List().AppendMutable().Message()
					} else {
						cur = cur.Mutable(fd).Message()
					}
				}
				if last.IsList() {
					cur.Mutable(last).List().Append(protoreflect.ValueOfString(bad))
				} else {
					cur.Set(last, protoreflect.ValueOfString(bad))
				}

				_, werr := proto.Marshal(m.Interface())
				if werr == nil {
					t.Fatal("proto.Marshal accepts the string: nothing to check")
				}
				if _, err := codec.Marshal(m.Interface()); err == nil || err.Error() != werr.Error() {
					t.Errorf("Marshal: %v, want %v", err, werr)
				}
				werr = proto.Unmarshal(enc, mt.New().Interface())
				if werr == nil {
					t.Fatal("proto.Unmarshal accepts the string: nothing to check")
				}
				if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc)}, mt.New().Interface()); err == nil || err.Error() != werr.Error() {
					t.Errorf("Unmarshal: %v, want %v", err, werr)
				}
			})
		}
	}
}

package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// apiSet is the API as compiled into this binary.
func apiSet() *descriptorpb.FileDescriptorSet {
	fd := protodesc.ToFileDescriptorProto(limiterv1.File_limiter_v1_limiter_proto)
	return &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fd}}
}

func message(set *descriptorpb.FileDescriptorSet, name string) *descriptorpb.DescriptorProto {
	for _, m := range set.File[0].MessageType {
		if m.GetName() == name {
			return m
		}
	}
	panic("no message " + name)
}

func field(m *descriptorpb.DescriptorProto, name string) *descriptorpb.FieldDescriptorProto {
	for _, f := range m.Field {
		if f.GetName() == name {
			return f
		}
	}
	panic("no field " + name)
}

func removeField(m *descriptorpb.DescriptorProto, name string) {
	for i, f := range m.Field {
		if f.GetName() == name {
			m.Field = append(m.Field[:i], m.Field[i+1:]...)
			return
		}
	}
	panic("no field " + name)
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *descriptorpb.FileDescriptorSet)
		want   string // a substring of the one problem expected; "" for none
	}{
		{"unchanged", func(*descriptorpb.FileDescriptorSet) {}, ""},
		{"field added", func(s *descriptorpb.FileDescriptorSet) {
			m := message(s, "IncrementRequest")
			m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{
				Name: proto.String("note"), JsonName: proto.String("note"), Number: proto.Int32(99),
				Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			})
		}, ""},
		{"rpc and message added", func(s *descriptorpb.FileDescriptorSet) {
			f := s.File[0]
			f.MessageType = append(f.MessageType, &descriptorpb.DescriptorProto{Name: proto.String("PingRequest")})
			f.Service[0].Method = append(f.Service[0].Method, &descriptorpb.MethodDescriptorProto{
				Name: proto.String("Ping"), InputType: proto.String(".limiter.v1.PingRequest"), OutputType: proto.String(".limiter.v1.PingRequest"),
			})
		}, ""},
		{"field removed, number reserved", func(s *descriptorpb.FileDescriptorSet) {
			m := message(s, "IncrementRequest")
			n := field(m, "at").GetNumber()
			removeField(m, "at")
			m.ReservedRange = append(m.ReservedRange, &descriptorpb.DescriptorProto_ReservedRange{Start: proto.Int32(n), End: proto.Int32(n + 1)})
		}, ""},
		{"field removed", func(s *descriptorpb.FileDescriptorSet) {
			removeField(message(s, "IncrementRequest"), "at")
		}, "field limiter.v1.IncrementRequest.at (= 5) was removed"},
		{"field renumbered", func(s *descriptorpb.FileDescriptorSet) {
			field(message(s, "IncrementRequest"), "at").Number = proto.Int32(15)
		}, "field limiter.v1.IncrementRequest.at (= 5) was removed"},
		{"field renamed", func(s *descriptorpb.FileDescriptorSet) {
			field(message(s, "IncrementRequest"), "key").Name = proto.String("id")
		}, "was renamed id"},
		{"JSON name changed", func(s *descriptorpb.FileDescriptorSet) {
			field(message(s, "IncrementRequest"), "key").JsonName = proto.String("Key")
		}, `JSON name "key" became "Key"`},
		{"field type changed", func(s *descriptorpb.FileDescriptorSet) {
			field(message(s, "IncrementRequest"), "key").Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
		}, "type TYPE_STRING became TYPE_BYTES"},
		{"field made repeated", func(s *descriptorpb.FileDescriptorSet) {
			field(message(s, "IncrementRequest"), "key").Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		}, "singular became repeated"},
		{"message removed", func(s *descriptorpb.FileDescriptorSet) {
			f := s.File[0]
			for i, m := range f.MessageType {
				if m.GetName() == "Limit" {
					f.MessageType = append(f.MessageType[:i], f.MessageType[i+1:]...)
					break
				}
			}
		}, "message limiter.v1.Limit was removed"},
		{"rpc removed", func(s *descriptorpb.FileDescriptorSet) {
			svc := s.File[0].Service[0]
			for i, m := range svc.Method {
				if m.GetName() == "Allow" {
					svc.Method = append(svc.Method[:i], svc.Method[i+1:]...)
					break
				}
			}
		}, "rpc limiter.v1.RateLimiter/Allow was removed"},
		{"rpc request type changed", func(s *descriptorpb.FileDescriptorSet) {
			for _, m := range s.File[0].Service[0].Method {
				if m.GetName() == "Allow" {
					m.InputType = proto.String(".limiter.v1.IncrementRequest")
				}
			}
		}, "rpc limiter.v1.RateLimiter/Allow: request type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, cur := apiSet(), apiSet()
			tt.change(cur)
			got := Compare(base, cur)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %q, want no problem", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Fatalf("got %q, want one problem containing %q", got, tt.want)
			}
		})
	}
}

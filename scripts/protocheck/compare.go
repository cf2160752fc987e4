package main

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/types/descriptorpb"
)

// api is what one version of package apiPackage declares, by full name.
type api struct {
	messages map[string]*descriptorpb.DescriptorProto
	enums    map[string]*descriptorpb.EnumDescriptorProto
	services map[string]*descriptorpb.ServiceDescriptorProto
}

func collect(set *descriptorpb.FileDescriptorSet) api {
	a := api{
		messages: map[string]*descriptorpb.DescriptorProto{},
		enums:    map[string]*descriptorpb.EnumDescriptorProto{},
		services: map[string]*descriptorpb.ServiceDescriptorProto{},
	}
	for _, f := range set.GetFile() {
		if f.GetPackage() != apiPackage {
			continue
		}
		prefix := f.GetPackage()
		for _, m := range f.GetMessageType() {
			a.addMessage(prefix, m)
		}
		for _, e := range f.GetEnumType() {
			a.enums[prefix+"."+e.GetName()] = e
		}
		for _, s := range f.GetService() {
			a.services[prefix+"."+s.GetName()] = s
		}
	}
	return a
}

func (a api) addMessage(prefix string, m *descriptorpb.DescriptorProto) {
	name := prefix + "." + m.GetName()
	a.messages[name] = m
	for _, n := range m.GetNestedType() {
		a.addMessage(name, n)
	}
	for _, e := range m.GetEnumType() {
		a.enums[name+"."+e.GetName()] = e
	}
}

// Compare returns the changes from base to cur that break clients of
// package apiPackage, one sentence each, sorted.
func Compare(base, cur *descriptorpb.FileDescriptorSet) []string {
	b, c := collect(base), collect(cur)
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	for name, bm := range b.messages {
		cm, ok := c.messages[name]
		if !ok {
			add("message %s was removed", name)
			continue
		}
		compareMessage(name, bm, cm, add)
	}
	for name, be := range b.enums {
		ce, ok := c.enums[name]
		if !ok {
			add("enum %s was removed", name)
			continue
		}
		compareEnum(name, be, ce, add)
	}
	for name, bs := range b.services {
		cs, ok := c.services[name]
		if !ok {
			add("service %s was removed", name)
			continue
		}
		methods := map[string]*descriptorpb.MethodDescriptorProto{}
		for _, m := range cs.GetMethod() {
			methods[m.GetName()] = m
		}
		for _, bm := range bs.GetMethod() {
			rpc := name + "/" + bm.GetName()
			cm, ok := methods[bm.GetName()]
			if !ok {
				add("rpc %s was removed", rpc)
				continue
			}
			if bm.GetInputType() != cm.GetInputType() {
				add("rpc %s: request type %s became %s", rpc, bm.GetInputType(), cm.GetInputType())
			}
			if bm.GetOutputType() != cm.GetOutputType() {
				add("rpc %s: response type %s became %s", rpc, bm.GetOutputType(), cm.GetOutputType())
			}
			if bm.GetClientStreaming() != cm.GetClientStreaming() || bm.GetServerStreaming() != cm.GetServerStreaming() {
				add("rpc %s: streaming changed", rpc)
			}
		}
	}
	sort.Strings(problems)
	return problems
}

func compareMessage(name string, bm, cm *descriptorpb.DescriptorProto, add func(string, ...any)) {
	byNumber := map[int32]*descriptorpb.FieldDescriptorProto{}
	for _, f := range cm.GetField() {
		byNumber[f.GetNumber()] = f
	}
	for _, bf := range bm.GetField() {
		field := fmt.Sprintf("%s.%s (= %d)", name, bf.GetName(), bf.GetNumber())
		cf, ok := byNumber[bf.GetNumber()]
		if !ok {
			if !reservedNumber(cm.GetReservedRange(), bf.GetNumber()) {
				add("field %s was removed without reserving its number", field)
			}
			continue
		}
		if bf.GetName() != cf.GetName() {
			add("field %s was renamed %s", field, cf.GetName())
		}
		if bf.GetJsonName() != cf.GetJsonName() {
			add("field %s: JSON name %q became %q", field, bf.GetJsonName(), cf.GetJsonName())
		}
		if bf.GetType() != cf.GetType() || bf.GetTypeName() != cf.GetTypeName() {
			add("field %s: type %s became %s", field, typeName(bf), typeName(cf))
		}
		if cardinality(bf) != cardinality(cf) {
			add("field %s: %s became %s", field, cardinality(bf), cardinality(cf))
		}
		if oneofName(bm, bf) != oneofName(cm, cf) {
			add("field %s: oneof %q became %q", field, oneofName(bm, bf), oneofName(cm, cf))
		}
	}
}

func compareEnum(name string, be, ce *descriptorpb.EnumDescriptorProto, add func(string, ...any)) {
	byNumber := map[int32]string{}
	for _, v := range ce.GetValue() {
		if _, dup := byNumber[v.GetNumber()]; !dup { // the first of aliases
			byNumber[v.GetNumber()] = v.GetName()
		}
	}
	for _, bv := range be.GetValue() {
		cn, ok := byNumber[bv.GetNumber()]
		if !ok {
			reserved := false
			for _, r := range ce.GetReservedRange() {
				// Enum reserved ranges are inclusive at both ends.
				if bv.GetNumber() >= r.GetStart() && bv.GetNumber() <= r.GetEnd() {
					reserved = true
				}
			}
			if !reserved {
				add("enum value %s.%s (= %d) was removed without reserving its number", name, bv.GetName(), bv.GetNumber())
			}
			continue
		}
		if cn != bv.GetName() {
			add("enum value %s.%s (= %d) was renamed %s", name, bv.GetName(), bv.GetNumber(), cn)
		}
	}
}

// reservedNumber reports whether n is in one of a message's reserved
// ranges (end exclusive).
func reservedNumber(ranges []*descriptorpb.DescriptorProto_ReservedRange, n int32) bool {
	for _, r := range ranges {
		if n >= r.GetStart() && n < r.GetEnd() {
			return true
		}
	}
	return false
}

func typeName(f *descriptorpb.FieldDescriptorProto) string {
	if f.GetTypeName() != "" {
		return f.GetTypeName()
	}
	return f.GetType().String()
}

// cardinality tells how a field is present on the wire and in the
// generated code.
func cardinality(f *descriptorpb.FieldDescriptorProto) string {
	switch {
	case f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED:
		return "repeated"
	case f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REQUIRED:
		return "required"
	case f.GetProto3Optional():
		return "optional"
	default:
		return "singular"
	}
}

// oneofName is the name of the real oneof holding f, or "" (a proto3
// optional field's synthetic oneof does not count: cardinality covers it).
func oneofName(m *descriptorpb.DescriptorProto, f *descriptorpb.FieldDescriptorProto) string {
	if f.OneofIndex == nil || f.GetProto3Optional() {
		return ""
	}
	i := int(f.GetOneofIndex())
	if i < 0 || i >= len(m.GetOneofDecl()) {
		return ""
	}
	return m.GetOneofDecl()[i].GetName()
}

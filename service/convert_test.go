package service

import (
	"reflect"
	"testing"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestEngineLayouts: each value type the service shares with the engine
// (convert.go) has the engine's fields, in its order, of the same sizes
// and kinds at the same offsets.
func TestEngineLayouts(t *testing.T) {
	for _, c := range []struct{ svc, eng reflect.Type }{
		{reflect.TypeFor[Rate](), reflect.TypeFor[ratelimit.Rate]()},
		{reflect.TypeFor[Limit](), reflect.TypeFor[ratelimit.Limit]()},
		{reflect.TypeFor[TokenBucket](), reflect.TypeFor[ratelimit.TokenBucket]()},
		{reflect.TypeFor[LeakyBucket](), reflect.TypeFor[ratelimit.LeakyBucket]()},
		{reflect.TypeFor[FixedBucket](), reflect.TypeFor[ratelimit.FixedBucket]()},
		{reflect.TypeFor[LimitStatus](), reflect.TypeFor[ratelimit.LimitStatus]()},
	} {
		sameLayout(t, c.svc, c.eng)
	}
	for k := range FixedKind + 1 {
		if got := ratelimit.LimitKind(k).String(); got != k.String() {
			t.Errorf("kind %d: the engine's %q, the service's %q", k, got, k.String())
		}
	}
}

func sameLayout(t *testing.T, a, b reflect.Type) {
	t.Helper()
	if a.Size() != b.Size() || a.Kind() != b.Kind() || a.Align() != b.Align() {
		t.Errorf("%v and %v: size %d/%d, kind %v/%v", a, b, a.Size(), b.Size(), a.Kind(), b.Kind())
		return
	}
	switch a.Kind() {
	case reflect.Struct:
		if a.NumField() != b.NumField() {
			t.Errorf("%v has %d fields, %v %d", a, a.NumField(), b, b.NumField())
			return
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Offset != fb.Offset {
				t.Errorf("%v.%s at %d, %v.%s at %d", a, fa.Name, fa.Offset, b, fb.Name, fb.Offset)
				continue
			}
			sameLayout(t, fa.Type, fb.Type)
		}
	case reflect.Slice:
		sameLayout(t, a.Elem(), b.Elem())
	}
}

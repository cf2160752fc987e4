package service_test

import (
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/service"
)

// engine are the packages a front must not reach: the service stands
// between them and every front.
var engine = []string{"github.com/limiterd/limiterd/node", "github.com/limiterd/limiterd/sync", "github.com/limiterd/limiterd/ratelimit"}

// TestServiceSpeaksItsOwnTypes: no method of *service.Service takes or
// returns a type of node, sync or ratelimit, nor one that holds such a type where a
// front can reach it (exported fields, elements, methods of interfaces).
func TestServiceSpeaksItsOwnTypes(t *testing.T) {
	st := reflect.TypeFor[*service.Service]()
	if st.NumMethod() < 10 {
		t.Fatalf("*service.Service has %d methods", st.NumMethod())
	}
	for i := range st.NumMethod() {
		m := st.Method(i)
		ft := m.Type
		for j := 1; j < ft.NumIn(); j++ { // 0 is the receiver
			checkType(t, m.Name+" argument "+strconv.Itoa(j), ft.In(j), map[reflect.Type]bool{})
		}
		for j := range ft.NumOut() {
			checkType(t, m.Name+" result "+strconv.Itoa(j), ft.Out(j), map[reflect.Type]bool{})
		}
	}
}

func checkType(t *testing.T, where string, ty reflect.Type, seen map[reflect.Type]bool) {
	t.Helper()
	if seen[ty] {
		return
	}
	seen[ty] = true
	for _, p := range engine {
		if ty.PkgPath() == p {
			t.Errorf("%s: %v is %s's", where, ty, p)
			return
		}
	}
	switch ty.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
		checkType(t, where, ty.Elem(), seen)
	case reflect.Map:
		checkType(t, where, ty.Key(), seen)
		checkType(t, where, ty.Elem(), seen)
	case reflect.Struct:
		for i := range ty.NumField() {
			if f := ty.Field(i); f.IsExported() {
				checkType(t, where+" ."+f.Name, f.Type, seen)
			}
		}
	case reflect.Func:
		for i := range ty.NumIn() {
			checkType(t, where, ty.In(i), seen)
		}
		for i := range ty.NumOut() {
			checkType(t, where, ty.Out(i), seen)
		}
	case reflect.Interface:
		for i := range ty.NumMethod() {
			checkType(t, where+" ."+ty.Method(i).Name, ty.Method(i).Type, seen)
		}
	}
	if ty.Kind() != reflect.Interface && ty.Name() != "" {
		pt := reflect.PointerTo(ty)
		for i := range pt.NumMethod() {
			if m := pt.Method(i); ty.PkgPath() == "github.com/limiterd/limiterd/service" {
				checkType(t, where+" ."+m.Name, m.Type, seen)
			}
		}
	}
}

// TestFrontsImportOnlyTheService: no file of the fronts' code imports
// node, sync or ratelimit.
func TestFrontsImportOnlyTheService(t *testing.T) {
	files := 0
	err := filepath.WalkDir(filepath.Join("..", "front"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(gotoken.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, e := range engine {
				if p == e {
					t.Errorf("%s imports %s", path, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Errorf("%d files of the fronts read; the walk misses some", files)
	}
}

package sync_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// abilityTypes are the store's interfaces: asserting one of them is
// asking a store's type.
var abilityTypes = map[string]bool{"Store": true, "PushFetcher": true, "GroupAllower": true,
	"BucketStore": true, "LeaseStore": true, "ChangeReader": true, "Windower": true}

// storeValue reports whether x names a store: store, or a field store.
func storeValue(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "store"
	case *ast.SelectorExpr:
		return x.Sel.Name == "store" || x.Sel.Name == "inner"
	}
	return false
}

// TestNoStoreAssertionOnCalls: the only type assertion on a store, or to
// one of a store's interfaces, in the sync package's code is takeAbility's,
// which NewSyncer runs once per ability (abilitiesOf); no call asks a store's type
// (a store's abilities are what it declares).
func TestNoStoreAssertionOnCalls(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "takeAbility" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				ta, ok := n.(*ast.TypeAssertExpr)
				if !ok {
					return true
				}
				id, _ := ta.Type.(*ast.Ident)
				if storeValue(ta.X) || (id != nil && abilityTypes[id.Name]) {
					t.Errorf("%s: a type assertion in %s; a store's abilities are read from its declaration (abilities.go)", fset.Position(ta.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d files, want the whole package", checked)
	}
}

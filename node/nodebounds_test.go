package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestUnknownNamespaceNamesTheNamespace: the error of a namespace the
// node does not serve names the namespace asked for, and "" as the
// default namespace, so that the caller sees which name was wrong.
func TestUnknownNamespaceNamesTheNamespace(t *testing.T) {
	n, err := node.New([]node.Config{localConfig(time.Second)}, nil) // serves only "test"
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"nope", `namespace "nope" is not configured`},
		{"", `namespace "default" is not configured`},
	} {
		_, err := n.Namespace(tc.name)
		wantFieldError(t, err, "namespace", node.ErrUnknownNamespace)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Namespace(%q): %v, want %s", tc.name, err, tc.want)
		}
	}
	if err := node.UnknownNamespace("nope", 0); err == nil || !strings.Contains(err.Error(), `namespace "nope" is not configured: this node serves no namespace`) {
		t.Errorf("UnknownNamespace(nope, 0) = %v, want it to name nope and say no namespace is served", err)
	}
}

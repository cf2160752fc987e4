package auth_test

import (
	"context"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
)

// FuzzPrincipal: whatever an Authorization value and a namespace hold,
// only the configured tokens authenticate, each as itself; nothing
// panics; an error never quotes the credential.
func FuzzPrincipal(f *testing.F) {
	for _, s := range []string{"Bearer " + writerToken, "bearer " + readerToken, "Bearer", "Basic dXNlcjpwYXNz", "Bearer \x00",
		"Bearer " + writerToken + "\x00", "Bearer  " + readerToken + " ", "BEARER " + strings.Repeat("a", 5000), "Bearer \u00e9\u00e9"} {
		f.Add(s, "api")
	}
	f.Add("Bearer "+writerToken, "")
	f.Add("Bearer "+writerToken, "*")
	a := newAuthorizer(f)
	f.Fuzz(func(t *testing.T, header, namespace string) {
		tok := auth.Bearer(header)
		if len(tok) > len(header) {
			t.Fatalf("Bearer(%q) = %q: longer", header, tok)
		}
		p := a.Token(tok)
		switch {
		case p == nil:
		case p.Name() == "writer" && tok == writerToken, p.Name() == "reader" && tok == readerToken:
		default:
			t.Fatalf("%q authenticates as %s", tok, p.Name())
		}
		ctx := context.Background()
		if p != nil {
			ctx = auth.WithPrincipal(ctx, p)
		}
		for _, op := range []auth.Op{auth.Read, auth.Write, auth.Admin} {
			err := a.Authorize(ctx, namespace, op)
			if err == nil && (p == nil || !p.Allows(namespace, op)) {
				t.Fatalf("%q may %s in %q", tok, op, namespace)
			}
			if err != nil && len(tok) >= auth.MinTokenLen && strings.Contains(err.Error(), tok) {
				t.Fatalf("%v quotes the token", err)
			}
		}
		if namespace == "*" && p != nil && p.Name() == "writer" && p.Allows(namespace, auth.Write) {
			t.Fatal(`a grant of named namespaces allows the namespace "*"`)
		}
	})
}

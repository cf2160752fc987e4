package auth_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/testcerts"
)

const (
	writerToken = "writer-token-0123456789"
	readerToken = "reader-token-0123456789"
)

func newAuthorizer(t testing.TB, ids ...auth.Identity) *auth.Authorizer {
	t.Helper()
	a, err := auth.New(auth.Config{
		Tokens: []auth.Token{
			{Name: "writer", Secret: writerToken, Namespaces: []string{"api", "default"}, Ops: auth.Read | auth.Write},
			{Name: "reader", Secret: readerToken, Namespaces: []string{"*"}, Ops: auth.Read},
		},
		Identities: ids,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAuthorize(t *testing.T) {
	a := newAuthorizer(t)
	for _, c := range []struct {
		token, ns string
		op        auth.Op
		want      error
	}{
		{"", "api", auth.Read, auth.ErrUnauthenticated},
		{"nope-nope-nope-nope", "api", auth.Read, auth.ErrUnauthenticated},
		{writerToken, "api", auth.Write, nil},
		{writerToken, "api", auth.Read, nil},
		{writerToken, "", auth.Write, nil}, // the default namespace
		{writerToken, "other", auth.Write, auth.ErrPermissionDenied},
		{writerToken, "api", auth.Admin, auth.ErrPermissionDenied},
		{readerToken, "other", auth.Read, nil},
		{readerToken, "api", auth.Write, auth.ErrPermissionDenied},
		{readerToken, "api", auth.Read | auth.Write, auth.ErrPermissionDenied},
	} {
		ctx := context.Background()
		if p := a.Token(c.token); p != nil {
			ctx = auth.WithPrincipal(ctx, p)
		}
		err := a.Authorize(ctx, c.ns, c.op)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%q %s in %q: %v; want %v", c.token, c.op, c.ns, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.token) && c.token != "" {
			t.Errorf("the error %q holds the token", err)
		}
		var de *auth.DeniedError
		if errors.As(err, &de) && (de.Namespace == "" || !strings.Contains(err.Error(), fmt.Sprintf("%q", de.Namespace))) {
			t.Errorf("%v does not name the namespace", err)
		}
	}
}

// TestNamespaceGrantIsExact: a grant of a namespace grants that name and
// no other, however near: not a name it is a prefix of, nor one that is a
// prefix of it, nor one differing in case or space.
func TestNamespaceGrantIsExact(t *testing.T) {
	a := newAuthorizer(t) // the writer is granted "api" and "default"
	ctx := auth.WithPrincipal(context.Background(), a.Token(writerToken))
	for _, c := range []struct {
		ns   string
		want error
	}{
		{"api", nil},
		{"default", nil},
		{"", nil}, // the default namespace
		{"api2", auth.ErrPermissionDenied},
		{"api-staging", auth.ErrPermissionDenied},
		{"api/v2", auth.ErrPermissionDenied},
		{"apis", auth.ErrPermissionDenied},
		{"ap", auth.ErrPermissionDenied},
		{"a", auth.ErrPermissionDenied},
		{"API", auth.ErrPermissionDenied},
		{"api ", auth.ErrPermissionDenied},
		{" api", auth.ErrPermissionDenied},
		{"xapi", auth.ErrPermissionDenied},
		{"default2", auth.ErrPermissionDenied},
		{"defaul", auth.ErrPermissionDenied},
		{"*", auth.ErrPermissionDenied},
	} {
		err := a.Authorize(ctx, c.ns, auth.Write)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("writer (granted api, default) writes in %q: %v; want %v", c.ns, err, c.want)
		}
	}
}

func TestBearer(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc", "Basic abc": "", "Bearer": "", "Bearer ": "",
		"": "", "Bearerabc": "", "Bearer " + strings.Repeat("x", auth.MaxTokenLen+100): "",
	} {
		if got := auth.Bearer(in); got != want {
			t.Errorf("Bearer(%.20q) = %q; want %q", in, got, want)
		}
	}
}

func TestTokenBounds(t *testing.T) {
	a := newAuthorizer(t)
	for _, tok := range []string{"", writerToken[:len(writerToken)-1], writerToken + "x", strings.Repeat("a", auth.MaxTokenLen+1), strings.ToUpper(writerToken)} {
		if p := a.Token(tok); p != nil {
			t.Errorf("Token(%.30q) = %s; want none", tok, p.Name())
		}
	}
}

// TestManyTokens: a hundred thousand tokens each find their own
// principal (a map lookup by hash, not a scan).
func TestManyTokens(t *testing.T) {
	var cfg auth.Config
	for i := range 100_000 {
		cfg.Tokens = append(cfg.Tokens, auth.Token{Name: fmt.Sprint("t", i), Secret: fmt.Sprintf("token-%016d", i), Namespaces: []string{"*"}, Ops: auth.Read})
	}
	a, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 4242, 99_999} {
		if p := a.Token(fmt.Sprintf("token-%016d", i)); p == nil || p.Name() != fmt.Sprint("t", i) {
			t.Errorf("token %d: %v", i, p)
		}
	}
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			a.Token("token-0000000000099999")
		}
	})
	if ns := res.NsPerOp(); ns > 20_000 {
		t.Errorf("a lookup among 100000 tokens takes %d ns", ns)
	}
}

func TestNewErrors(t *testing.T) {
	ok := auth.Token{Name: "a", Secret: writerToken, Namespaces: []string{"api"}, Ops: auth.Read}
	for _, c := range []struct {
		cfg   auth.Config
		field string
	}{
		{auth.Config{Tokens: []auth.Token{{Secret: writerToken, Namespaces: []string{"api"}, Ops: auth.Read}}}, "tokens[0].name"},
		{auth.Config{Tokens: []auth.Token{ok, ok}}, "tokens[1].name"},
		{auth.Config{Tokens: []auth.Token{ok, {Name: "b", Secret: writerToken, Namespaces: []string{"api"}, Ops: auth.Read}}}, "tokens[1].token"},
		{auth.Config{Tokens: []auth.Token{{Name: "a", Secret: "short", Namespaces: []string{"api"}, Ops: auth.Read}}}, "tokens[0].token"},
		{auth.Config{Tokens: []auth.Token{{Name: "a", Secret: writerToken, Ops: auth.Read}}}, "tokens[0].namespaces"},
		{auth.Config{Tokens: []auth.Token{{Name: "a", Secret: writerToken, Namespaces: []string{""}, Ops: auth.Read}}}, "tokens[0].namespaces[0]"},
		{auth.Config{Tokens: []auth.Token{{Name: "a", Secret: writerToken, Namespaces: []string{"api"}}}}, "tokens[0].operations"},
		{auth.Config{Identities: []auth.Identity{{SubjectCN: "a", URISAN: "spiffe://x", Namespaces: []string{"api"}, Ops: auth.Read}}}, "identities[0].uri_san"},
		{auth.Config{Identities: []auth.Identity{{Namespaces: []string{"api"}, Ops: auth.Read}}}, "identities[0]"},
		{auth.Config{Identities: []auth.Identity{{SHA256: "zz", Namespaces: []string{"api"}, Ops: auth.Read}}}, "identities[0].sha256"},
		{auth.Config{Identities: []auth.Identity{{SubjectCN: "a", Namespaces: []string{"api"}, Ops: auth.Read},
			{Name: "b", SubjectCN: "a", Namespaces: []string{"api"}, Ops: auth.Read}}}, "identities[1]"},
	} {
		_, err := auth.New(c.cfg)
		var ce *auth.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v; want an error on %s", c.cfg, err, c.field)
			continue
		}
		if strings.Contains(err.Error(), writerToken) {
			t.Errorf("%v holds the token", err)
		}
	}
}

func TestParseOp(t *testing.T) {
	for _, s := range []string{"read", "write", "admin"} {
		op, err := auth.ParseOp(s)
		if err != nil || op.String() != s {
			t.Errorf("%s: %v %v", s, op, err)
		}
	}
	if _, err := auth.ParseOp("Read"); err == nil {
		t.Error("Read parsed")
	}
	if got := (auth.Read | auth.Write).String(); got != "read+write" {
		t.Errorf("got %s", got)
	}
}

// TestCertificate: a verified certificate matches by URI SAN, then by
// subject CN; a pinned one by its hash even unverified; an unverified
// one by nothing else.
func TestCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	byCN, byURI, pinned := ca.Client(t, "svc-a", "", "").TLS(t), ca.Client(t, "svc-b", "", "spiffe://example.org/svc-b").TLS(t), ca.Client(t, "svc-c", "", "").TLS(t)
	sum := sha256.Sum256(pinned.Leaf.Raw)
	a := newAuthorizer(t,
		auth.Identity{SubjectCN: "svc-a", Namespaces: []string{"api"}, Ops: auth.Write},
		auth.Identity{Name: "b", URISAN: "spiffe://example.org/svc-b", Namespaces: []string{"api"}, Ops: auth.Read},
		auth.Identity{SHA256: strings.ToUpper(hex.EncodeToString(sum[:2])) + ":" + hex.EncodeToString(sum[2:]), Namespaces: []string{"*"}, Ops: auth.Admin},
	)
	state := func(c tls.Certificate, verified bool) *tls.ConnectionState {
		cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.Leaf}}
		if verified {
			cs.VerifiedChains = [][]*x509.Certificate{{c.Leaf, ca.Cert}}
		}
		return cs
	}
	for _, c := range []struct {
		cs   *tls.ConnectionState
		want string
	}{
		{nil, ""}, {&tls.ConnectionState{}, ""},
		{state(byCN, true), "cn:svc-a"}, {state(byCN, false), ""},
		{state(byURI, true), "b"}, {state(byURI, false), ""},
		{state(pinned, false), "sha256:"},
		{state(ca.Client(t, "svc-d", "", "").TLS(t), true), ""},
	} {
		p := a.TLS(c.cs)
		got := ""
		if p != nil {
			got = p.Name()
		}
		if !strings.HasPrefix(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("got %q; want %q", got, c.want)
		}
	}
	// A token wins over the certificate; a wrong one is no fallback.
	if p := a.Authenticate(readerToken, state(byCN, true)); p == nil || p.Name() != "reader" {
		t.Errorf("token and certificate: %v", p)
	}
	if p := a.Authenticate("wrong-wrong-wrong-wrong", state(byCN, true)); p != nil {
		t.Errorf("a wrong token fell back to the certificate: %s", p.Name())
	}
}

func BenchmarkAuthorize(b *testing.B) {
	a := newAuthorizer(b)
	ctx := auth.WithPrincipal(context.Background(), a.Token(writerToken))
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Authorize(ctx, "api", auth.Write); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkToken(b *testing.B) {
	a := newAuthorizer(b)
	b.ReportAllocs()
	for b.Loop() {
		if a.Token(writerToken) == nil {
			b.Fatal("no principal")
		}
	}
}

// TestReplace: replacing an Authorizer's credentials takes effect from the
// next call: a token no longer configured authenticates nothing, and a
// principal found with it before (a Redis-protocol connection's) is
// refused; a token still configured is authorized by its new grants; a
// new token is accepted.
func TestReplace(t *testing.T) {
	const oldSecret, keptSecret, newSecret = "old-token-0123456789", "kept-token-0123456789", "new-token-0123456789"
	mk := func(tokens ...auth.Token) *auth.Authorizer {
		t.Helper()
		a, err := auth.New(auth.Config{Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := mk(auth.Token{Name: "old", Secret: oldSecret, Namespaces: []string{"*"}, Ops: auth.Read | auth.Write},
		auth.Token{Name: "kept", Secret: keptSecret, Namespaces: []string{"*"}, Ops: auth.Read | auth.Write})
	bg := context.Background()
	before, kept := auth.WithPrincipal(bg, a.Token(oldSecret)), auth.WithPrincipal(bg, a.Token(keptSecret))
	handMade := auth.WithPrincipal(bg, auth.NewPrincipal("hand", []string{"ns"}, auth.Write))
	for _, ctx := range []context.Context{before, kept, handMade} {
		if err := a.Authorize(ctx, "ns", auth.Write); err != nil {
			t.Fatalf("before the replacement: %v", err)
		}
	}
	a.Replace(mk(auth.Token{Name: "kept", Secret: keptSecret, Namespaces: []string{"ns"}, Ops: auth.Read},
		auth.Token{Name: "new", Secret: newSecret, Namespaces: []string{"ns"}, Ops: auth.Write}))
	if a.Token(oldSecret) != nil {
		t.Error("the removed token still authenticates")
	}
	if err := a.Authorize(before, "ns", auth.Read); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("a principal of the removed token: %v; want unauthenticated", err)
	}
	if err := a.Authorize(kept, "ns", auth.Read); err != nil {
		t.Errorf("the kept token's principal found before, reading: %v", err)
	}
	if err := a.Authorize(kept, "ns", auth.Write); !errors.Is(err, auth.ErrPermissionDenied) {
		t.Errorf("the kept token's principal found before, writing (no longer granted): %v", err)
	}
	if err := a.Authorize(kept, "other", auth.Read); !errors.Is(err, auth.ErrPermissionDenied) {
		t.Errorf("the kept token's principal found before, in a namespace no longer granted: %v", err)
	}
	if err := a.Authorize(auth.WithPrincipal(bg, a.Token(newSecret)), "ns", auth.Write); err != nil {
		t.Errorf("the new token: %v", err)
	}
	if err := a.Authorize(handMade, "ns", auth.Write); err != nil {
		t.Errorf("a principal made by hand: %v", err)
	}
	if n, m := a.Credentials(); n != 2 || m != 0 {
		t.Errorf("Credentials() = %d, %d; want 2, 0", n, m)
	}
	var zero auth.Authorizer
	if zero.Token(newSecret) != nil || zero.TLS(&tls.ConnectionState{}) != nil {
		t.Error("the zero auth.Authorizer authenticates")
	}
}

// TestSame: an Authorizer whose credentials were replaced by another's
// holds the same ones; another built from the same config does not.
func TestSame(t *testing.T) {
	cfg := auth.Config{Tokens: []auth.Token{{Name: "t", Secret: "same-token-0123456789", Namespaces: []string{"*"}, Ops: auth.Read}}}
	a, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var running auth.Authorizer
	if running.Same(a) {
		t.Error("the zero Authorizer holds a's credentials")
	}
	running.Replace(a)
	if !running.Same(a) || running.Same(b) {
		t.Errorf("after Replace(a): Same(a) %v, Same(b) %v; want true, false", running.Same(a), running.Same(b))
	}
}

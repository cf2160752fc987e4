package auth_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/testcerts"
)

// TestDeniedErrorNamesTheNamespace: a refusal names the namespace asked
// for, and the default namespace by its name when the call gave none.
func TestDeniedErrorNamesTheNamespace(t *testing.T) {
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "api-writer", Secret: writerToken, Namespaces: []string{"api"}, Ops: auth.Write},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := auth.WithPrincipal(context.Background(), a.Token(writerToken))
	for ns, want := range map[string]string{"": auth.DefaultNamespace, "other": "other"} {
		var de *auth.DeniedError
		if err := a.Authorize(ctx, ns, auth.Write); !errors.As(err, &de) || de.Namespace != want || de.Principal != "api-writer" {
			t.Errorf("write in %q: %v; want a refusal of api-writer in %q", ns, err, want)
		}
	}
}

// TestTokenLengthBounds: a configured token may be MinTokenLen to
// MaxTokenLen bytes long, both ends included, and one of either length
// is found; one byte shorter or longer is a configuration error.
func TestTokenLengthBounds(t *testing.T) {
	for _, n := range []int{auth.MinTokenLen, auth.MaxTokenLen} {
		secret := strings.Repeat("s", n)
		a, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "t", Secret: secret, Namespaces: []string{"api"}, Ops: auth.Read}}})
		if err != nil {
			t.Errorf("a %d-byte token: %v", n, err)
			continue
		}
		if p := a.Token(secret); p == nil || p.Name() != "t" {
			t.Errorf("a %d-byte token not found: %v", n, p)
		}
	}
	for _, n := range []int{auth.MinTokenLen - 1, auth.MaxTokenLen + 1} {
		_, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "t", Secret: strings.Repeat("s", n), Namespaces: []string{"api"}, Ops: auth.Read}}})
		var ce *auth.ConfigError
		if !errors.As(err, &ce) || ce.Field != "tokens[0].token" {
			t.Errorf("a %d-byte token: %v; want an error on tokens[0].token", n, err)
		}
	}
}

// TestRequestLongestToken: an HTTP request whose Authorization header
// holds a configured token of MaxTokenLen bytes is that token's
// principal.
func TestRequestLongestToken(t *testing.T) {
	secret := strings.Repeat("L", auth.MaxTokenLen)
	a, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "long", Secret: secret, Namespaces: []string{"api"}, Ops: auth.Read}}})
	if err != nil {
		t.Fatal(err)
	}
	// The header may be MaxAuthorizationBytes long, spaces after the
	// token included.
	for _, v := range []string{"Bearer " + secret, "Bearer " + secret + strings.Repeat(" ", auth.MaxAuthorizationBytes-len("Bearer ")-len(secret))} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", v)
		if p := a.Request(r); p == nil || p.Name() != "long" {
			t.Errorf("a %d-byte Authorization header: principal %v; want long", len(v), p)
		}
	}
}

// TestBearerLongestValue: Bearer takes a value up to the scheme,
// MaxTokenLen and 64 bytes of spaces long, and none longer.
func TestBearerLongestValue(t *testing.T) {
	max := len("Bearer ") + auth.MaxTokenLen + 64
	tok := strings.Repeat("x", max-len("Bearer "))
	if got := auth.Bearer("Bearer " + tok); got != tok {
		t.Errorf("Bearer of a %d-byte value = %.20q (%d bytes); want the token", max, got, len(got))
	}
	if got := auth.Bearer("Bearer " + tok + "x"); got != "" {
		t.Errorf("Bearer of a %d-byte value = %.20q; want none", max+1, got)
	}
}

// TestFingerprintErrors: a pin of the wrong length says how many hex
// digits it needs and got; one with a digit that is not hex quotes the
// byte it could not read.
func TestFingerprintErrors(t *testing.T) {
	good := strings.Repeat("ab", sha256.Size)
	for pin, want := range map[string]string{
		"abcd":                           "must be 64 hex digits (colons allowed), got 4",
		good[:10] + "0g" + good[12:]:     `must be hex digits, got "0g"`,
		good[:20] + "g0" + good[22:]:     `must be hex digits, got "g0"`,
		"ab:" + good[:60] + "Zz" + ":00": `must be 64 hex digits (colons allowed), got 66`,
	} {
		_, err := auth.New(auth.Config{Identities: []auth.Identity{{SHA256: pin, Namespaces: []string{"api"}, Ops: auth.Read}}})
		var ce *auth.ConfigError
		if !errors.As(err, &ce) || ce.Field != "identities[0].sha256" || ce.Reason != want {
			t.Errorf("pin %.30q: %v; want identities[0].sha256: %s", pin, err, want)
		}
	}
}

// TestFingerprintAnyCase: a pin's hex digits may be upper or lower case,
// A to F included: the same digits in either case pin the same
// certificate.
func TestFingerprintAnyCase(t *testing.T) {
	pin := strings.Repeat("af09", sha256.Size/2)
	_, err := auth.New(auth.Config{Identities: []auth.Identity{
		{Name: "lower", SHA256: pin, Namespaces: []string{"api"}, Ops: auth.Read},
		{Name: "upper", SHA256: strings.ToUpper(pin), Namespaces: []string{"api"}, Ops: auth.Read},
	}})
	var ce *auth.ConfigError
	if !errors.As(err, &ce) || ce.Field != "identities[1]" || !strings.Contains(ce.Reason, "same certificates") {
		t.Errorf("%s and %s: %v; want identities[1] to match the same certificates", pin[:8], strings.ToUpper(pin[:8]), err)
	}
}

// TestOneKindOfIdentity: an authorizer whose identities are all of one
// kind (subject CN, URI SAN or pin) finds a certificate of that kind.
func TestOneKindOfIdentity(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	byCN, byURI := ca.Client(t, "svc-a", "", "").TLS(t), ca.Client(t, "svc-b", "", "spiffe://example.org/svc-b").TLS(t)
	pinned := ca.Client(t, "svc-c", "", "").TLS(t)
	sum := sha256.Sum256(pinned.Leaf.Raw)
	for _, c := range []struct {
		id   auth.Identity
		cert tls.Certificate
	}{
		{auth.Identity{Name: "cn", SubjectCN: "svc-a"}, byCN},
		{auth.Identity{Name: "uri", URISAN: "spiffe://example.org/svc-b"}, byURI},
		{auth.Identity{Name: "pin", SHA256: hex.EncodeToString(sum[:])}, pinned},
	} {
		c.id.Namespaces, c.id.Ops = []string{"api"}, auth.Read
		a, err := auth.New(auth.Config{Identities: []auth.Identity{c.id}})
		if err != nil {
			t.Fatal(err)
		}
		cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.cert.Leaf}, VerifiedChains: [][]*x509.Certificate{{c.cert.Leaf, ca.Cert}}}
		if p := a.TLS(cs); p == nil || p.Name() != c.id.Name {
			t.Errorf("only a %s identity: principal %v; want it", c.id.Name, p)
		}
	}
}

// TestCredentialsCounts: Credentials counts the tokens, and the
// identities of every kind (certificate pins, URI SANs and subject CNs)
// together.
func TestCredentialsCounts(t *testing.T) {
	grant := func(id auth.Identity) auth.Identity {
		id.Namespaces, id.Ops = []string{"api"}, auth.Read
		return id
	}
	a, err := auth.New(auth.Config{
		Tokens: []auth.Token{{Name: "t", Secret: strings.Repeat("s", auth.MinTokenLen), Namespaces: []string{"api"}, Ops: auth.Read}},
		Identities: []auth.Identity{
			grant(auth.Identity{Name: "pin", SHA256: strings.Repeat("ab", sha256.Size)}),
			grant(auth.Identity{Name: "uri1", URISAN: "spiffe://example.org/a"}),
			grant(auth.Identity{Name: "uri2", URISAN: "spiffe://example.org/b"}),
			grant(auth.Identity{Name: "cn1", SubjectCN: "a"}),
			grant(auth.Identity{Name: "cn2", SubjectCN: "b"}),
			grant(auth.Identity{Name: "cn3", SubjectCN: "c"}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tokens, ids := a.Credentials(); tokens != 1 || ids != 6 {
		t.Errorf("Credentials() = %d, %d; want 1 token, 6 identities", tokens, ids)
	}
}

package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync/atomic"
)

// MaxTokenLen is the longest token accepted: a longer credential is
// refused without being hashed.
const MaxTokenLen = 4096

// MinTokenLen is the shortest token that may be configured.
const MinTokenLen = 16

// Token is a bearer token and its grants.
type Token struct {
	// Name identifies the token in errors and logs.
	Name string
	// Secret is the token itself; only its hash is kept.
	Secret string
	// Namespaces granted ("*": all).
	Namespaces []string
	// Ops granted.
	Ops Op
}

// Identity is a client certificate identity and its grants. Exactly one
// of SubjectCN, URISAN and SHA256 matches it.
type Identity struct {
	// Name identifies it in errors and logs (default: what it matches).
	Name string
	// SubjectCN matches a verified certificate's subject common name.
	SubjectCN string
	// URISAN matches one of a verified certificate's URI SANs (say a
	// SPIFFE id).
	URISAN string
	// SHA256 matches the SHA-256 of the certificate (DER), in hex,
	// colons allowed; it needs no CA, as it pins the certificate itself.
	SHA256 string
	// Namespaces granted ("*": all).
	Namespaces []string
	// Ops granted.
	Ops Op
}

// Config is every credential.
type Config struct {
	Tokens     []Token
	Identities []Identity
}

// Authorizer finds principals from credentials and authorizes calls. It
// is safe for concurrent use. Its credentials are replaced as a whole
// (Replace, a reload of the configuration): every call after the
// replacement sees the new ones, and a principal found with the old ones
// (a Redis-protocol connection's, authenticated before) is authorized by
// what the new ones grant its credential, refused when they no longer
// hold it. The zero Authorizer holds no credential.
type Authorizer struct {
	t atomic.Pointer[tables]
}

// tables are an Authorizer's credentials, never changed once made.
type tables struct {
	tokens map[[sha256.Size]byte]*tokenEntry
	byHash map[[sha256.Size]byte]*Principal
	byURI  map[string]*Principal
	byCN   map[string]*Principal
}

// noTables are the credentials of the zero Authorizer.
var noTables = &tables{}

// tab returns a's credentials.
func (a *Authorizer) tab() *tables {
	if t := a.t.Load(); t != nil {
		return t
	}
	return noTables
}

// Replace makes b's credentials a's, at once: the next call a
// authenticates or authorizes uses them. b must not be nil.
func (a *Authorizer) Replace(b *Authorizer) { a.t.Store(b.tab()) }

// Same reports whether a and b hold the same credentials (b's replaced
// a's, or the other way round, and nothing since).
func (a *Authorizer) Same(b *Authorizer) bool { return a.tab() == b.tab() }

// Credentials counts a's tokens and identities.
func (a *Authorizer) Credentials() (tokens, identities int) {
	t := a.tab()
	return len(t.tokens), len(t.byHash) + len(t.byURI) + len(t.byCN)
}

type tokenEntry struct {
	hash [sha256.Size]byte
	p    *Principal
}

// New checks cfg and makes its Authorizer. Its errors name the
// credential by index and field, never a secret.
func New(cfg Config) (*Authorizer, error) {
	a := &tables{tokens: map[[sha256.Size]byte]*tokenEntry{}, byHash: map[[sha256.Size]byte]*Principal{},
		byURI: map[string]*Principal{}, byCN: map[string]*Principal{}}
	names := map[string]bool{}
	for i, t := range cfg.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		if err := checkGrant(field, t.Name, t.Namespaces, t.Ops, names); err != nil {
			return nil, err
		}
		if len(t.Secret) < MinTokenLen || len(t.Secret) > MaxTokenLen {
			return nil, &ConfigError{Field: field + ".token", Reason: fmt.Sprintf("must be %d to %d bytes long, got %d", MinTokenLen, MaxTokenLen, len(t.Secret))}
		}
		h := sha256.Sum256([]byte(t.Secret))
		if a.tokens[h] != nil {
			return nil, &ConfigError{Field: field + ".token", Reason: fmt.Sprintf("is the same token as %s's", a.tokens[h].p.name)}
		}
		p := NewPrincipal(t.Name, t.Namespaces, t.Ops)
		p.tab, p.cred = a, credential{kind: credToken, hash: h}
		a.tokens[h] = &tokenEntry{hash: h, p: p}
	}
	for i, id := range cfg.Identities {
		field := fmt.Sprintf("identities[%d]", i)
		set := 0
		for i, v := range []string{id.SubjectCN, id.URISAN, id.SHA256} {
			if v == "" {
				continue
			}
			if set++; set > 1 {
				return nil, &ConfigError{Field: field + "." + [...]string{"subject_cn", "uri_san", "sha256"}[i],
					Reason: "give exactly one of subject_cn, uri_san and sha256"}
			}
		}
		if set == 0 {
			return nil, &ConfigError{Field: field, Reason: "give one of subject_cn, uri_san and sha256"}
		}
		name := id.Name
		if name == "" {
			name = "cn:" + id.SubjectCN
			switch {
			case id.URISAN != "":
				name = "uri:" + id.URISAN
			case id.SHA256 != "":
				name = "sha256:" + id.SHA256
			}
		}
		if err := checkGrant(field, name, id.Namespaces, id.Ops, names); err != nil {
			return nil, err
		}
		p := NewPrincipal(name, id.Namespaces, id.Ops)
		p.tab = a
		dup := false
		switch {
		case id.SubjectCN != "":
			p.cred = credential{kind: credCN, s: id.SubjectCN}
			dup, a.byCN[id.SubjectCN] = a.byCN[id.SubjectCN] != nil, p
		case id.URISAN != "":
			p.cred = credential{kind: credURI, s: id.URISAN}
			dup, a.byURI[id.URISAN] = a.byURI[id.URISAN] != nil, p
		default:
			h, err := parseFingerprint(id.SHA256)
			if err != nil {
				return nil, &ConfigError{Field: field + ".sha256", Reason: err.Error()}
			}
			p.cred = credential{kind: credPin, hash: h}
			dup, a.byHash[h] = a.byHash[h] != nil, p
		}
		if dup {
			return nil, &ConfigError{Field: field, Reason: "matches the same certificates as an identity before it"}
		}
	}
	au := &Authorizer{}
	au.t.Store(a)
	return au, nil
}

// current returns the principal p stands for in a's credentials now: p
// itself when it was found in them, else the principal of its credential
// in them, nil when they no longer hold it. A principal not made by an
// Authorizer (NewPrincipal) stands for itself.
func (a *Authorizer) current(p *Principal) *Principal {
	t := a.tab()
	if p == nil || p.tab == nil || p.tab == t {
		return p
	}
	switch p.cred.kind {
	case credToken:
		if e := t.tokens[p.cred.hash]; e != nil {
			return e.p
		}
	case credPin:
		return t.byHash[p.cred.hash]
	case credURI:
		return t.byURI[p.cred.s]
	case credCN:
		return t.byCN[p.cred.s]
	}
	return nil
}

// checkGrant checks a credential's name and grants.
func checkGrant(field, name string, namespaces []string, ops Op, names map[string]bool) error {
	switch {
	case name == "":
		return &ConfigError{Field: field + ".name", Reason: "must not be empty"}
	case names[name]:
		return &ConfigError{Field: field + ".name", Reason: fmt.Sprintf("%q names another credential too", name)}
	case len(namespaces) == 0:
		return &ConfigError{Field: field + ".namespaces", Reason: `must list at least one namespace, or "*" for all`}
	case ops == 0:
		return &ConfigError{Field: field + ".operations", Reason: "must list at least one of read, write and admin"}
	}
	for j, ns := range namespaces {
		if ns == "" {
			return &ConfigError{Field: fmt.Sprintf("%s.namespaces[%d]", field, j), Reason: "must not be empty"}
		}
	}
	names[name] = true
	return nil
}

// parseFingerprint parses a SHA-256 in hex, colons allowed.
func parseFingerprint(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	s = strings.ReplaceAll(s, ":", "")
	if len(s) != 2*sha256.Size {
		return h, fmt.Errorf("must be %d hex digits (colons allowed), got %d", 2*sha256.Size, len(s))
	}
	for i := range h {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return h, fmt.Errorf("must be hex digits, got %q", s[2*i:2*i+2])
		}
		h[i] = hi<<4 | lo
	}
	return h, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ConfigError is a credential's configuration error: the field (such as
// "tokens[2].namespaces") and why.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string { return "auth: " + e.Field + ": " + e.Reason }

// Token returns the principal of a bearer token, or nil when the token is
// not configured. The token is hashed and looked up by its hash, then the
// hashes compared in constant time: the lookup's timing depends only on
// the hash, which tells nothing of a configured token.
func (a *Authorizer) Token(token string) *Principal {
	if len(token) == 0 || len(token) > MaxTokenLen {
		return nil
	}
	h := sha256.Sum256([]byte(token))
	e := a.tab().tokens[h]
	if e == nil || subtle.ConstantTimeCompare(e.hash[:], h[:]) != 1 {
		return nil
	}
	return e.p
}

// Bearer returns the token of an Authorization value "Bearer <token>"
// (the scheme in any case), or "" when v is not one.
func Bearer(v string) string {
	const scheme = "bearer "
	if len(v) <= len(scheme) || len(v) > len(scheme)+MaxTokenLen+64 || !strings.EqualFold(v[:len(scheme)], scheme) {
		return ""
	}
	return strings.Trim(v[len(scheme):], " \t")
}

// Certificate returns the principal of a client certificate, or nil.
// verified reports whether the certificate was verified against the CA:
// a subject CN or URI SAN is trusted only then, a SHA-256 pin always (the
// TLS handshake proved the client holds the certificate's key).
func (a *Authorizer) Certificate(cert *x509.Certificate, verified bool) *Principal {
	return a.tab().certificate(cert, verified)
}

func (t *tables) certificate(cert *x509.Certificate, verified bool) *Principal {
	if cert == nil {
		return nil
	}
	if len(t.byHash) > 0 {
		if p := t.byHash[sha256.Sum256(cert.Raw)]; p != nil {
			return p
		}
	}
	if !verified {
		return nil
	}
	for _, u := range cert.URIs {
		if p := t.byURI[u.String()]; p != nil {
			return p
		}
	}
	return t.byCN[cert.Subject.CommonName]
}

// TLS returns the principal of a TLS connection's client certificate, or
// nil (no TLS, no certificate, or none configured).
func (a *Authorizer) TLS(cs *tls.ConnectionState) *Principal {
	t := a.tab()
	if cs == nil || len(cs.PeerCertificates) == 0 || (len(t.byHash) == 0 && len(t.byURI) == 0 && len(t.byCN) == 0) {
		return nil
	}
	return t.certificate(cs.PeerCertificates[0], len(cs.VerifiedChains) > 0)
}

// Authenticate returns the principal of a call: its bearer token when it
// gave one (a wrong token is refused, not passed over for the
// certificate), else its client certificate; nil when neither is
// configured.
func (a *Authorizer) Authenticate(token string, cs *tls.ConnectionState) *Principal {
	if token != "" {
		return a.Token(token)
	}
	return a.TLS(cs)
}

// Authorize checks ctx's principal as the package function does, in a's
// credentials now: a principal found before a Replace is authorized by
// what the new credentials grant its token or certificate, and refused
// (ErrUnauthenticated) when they no longer hold it.
func (a *Authorizer) Authorize(ctx context.Context, namespace string, op Op) error {
	return authorize(a.current(FromContext(ctx)), namespace, op)
}

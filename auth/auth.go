package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Op is a set of operations.
type Op uint8

// The operations.
const (
	// Read: calls that count and create nothing (SlidingWindow in a
	// local namespace).
	Read Op = 1 << iota
	// Write: calls that count or can create state (Increment, Allow of
	// any cost, Acquire, Release, Renew, SlidingWindow in a syncing
	// namespace).
	Write
	// Admin: the admin operations.
	Admin
)

var opNames = [...]string{"read", "write", "admin"}

// ParseOp parses one operation's name: read, write or admin.
func ParseOp(s string) (Op, error) {
	for i, n := range opNames {
		if s == n {
			return 1 << i, nil
		}
	}
	return 0, fmt.Errorf("unknown operation %q: must be read, write or admin", s)
}

// String names the operations of o, joined by "+".
func (o Op) String() string {
	var names []string
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// AllNamespaces, as a granted namespace, grants every namespace.
const AllNamespaces = "*"

// DefaultNamespace is the namespace a call that names none is in.
const DefaultNamespace = "default"

// Principal is an authenticated caller and what it is granted. It is
// immutable once made and safe for concurrent use.
type Principal struct {
	name       string
	all        bool
	namespaces map[string]bool
	ops        Op
	// tab, for a principal an Authorizer found, is the credentials it was
	// found in, cred its credential there.
	tab  *tables
	cred credential
}

// credential is what a principal was found by: a token's hash, a
// certificate's (a pin), its URI SAN or its subject CN.
type credential struct {
	kind credKind
	hash [32]byte
	s    string
}

type credKind uint8

const (
	credToken credKind = iota + 1
	credPin
	credURI
	credCN
)

// NewPrincipal grants name the operations ops in namespaces ("*": every
// namespace).
func NewPrincipal(name string, namespaces []string, ops Op) *Principal {
	p := &Principal{name: name, ops: ops, namespaces: map[string]bool{}}
	for _, ns := range namespaces {
		if ns == AllNamespaces {
			p.all = true
		}
		p.namespaces[ns] = true
	}
	return p
}

// Name is the principal's configured name, for errors and logs: never a
// secret.
func (p *Principal) Name() string { return p.name }

// Allows reports whether p may do every operation of op in namespace
// ("" is the default namespace).
func (p *Principal) Allows(namespace string, op Op) bool {
	if p == nil || p.ops&op != op {
		return false
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return p.all || p.namespaces[namespace]
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}

// Sentinel errors of Authorize.
var (
	// ErrUnauthenticated: the call carries no credential, or one that is
	// not configured.
	ErrUnauthenticated = errors.New("unauthenticated: a configured bearer token or client certificate is required")
	// ErrPermissionDenied: the caller is not granted the operation in the
	// namespace (wrapped by *DeniedError).
	ErrPermissionDenied = errors.New("permission denied")
)

// DeniedError is a refusal naming the caller, the namespace and the
// operation. It wraps ErrPermissionDenied.
type DeniedError struct {
	Principal string
	Namespace string
	Op        Op
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("permission denied: %s is not granted %s in namespace %q", e.Principal, e.Op, e.Namespace)
}

func (e *DeniedError) Unwrap() error { return ErrPermissionDenied }

// Authorize checks that ctx's principal may do op in namespace ("" is the
// default namespace): ErrUnauthenticated without a principal, a
// *DeniedError when it is not granted.
func Authorize(ctx context.Context, namespace string, op Op) error {
	return authorize(FromContext(ctx), namespace, op)
}

func authorize(p *Principal, namespace string, op Op) error {
	if p == nil {
		return ErrUnauthenticated
	}
	if p.Allows(namespace, op) {
		return nil
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &DeniedError{Principal: p.name, Namespace: namespace, Op: op}
}

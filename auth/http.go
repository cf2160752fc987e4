package auth

import (
	"net/http"
)

// MaxAuthorizationBytes bounds the Authorization header read: a longer
// one is no credential, and is not hashed.
const MaxAuthorizationBytes = MaxTokenLen + 64

// Request returns the principal of an HTTP request, or nil: its bearer
// token (the Authorization header), else its TLS client certificate. A
// request with several Authorization headers, or one that is no bearer
// token or is too long, has none.
func (a *Authorizer) Request(r *http.Request) *Principal {
	token := ""
	if vs := r.Header.Values("Authorization"); len(vs) > 0 {
		if len(vs) > 1 || len(vs[0]) > MaxAuthorizationBytes {
			return nil
		}
		if token = Bearer(vs[0]); token == "" {
			return nil
		}
	}
	return a.Authenticate(token, r.TLS)
}

// Middleware serves next only to requests whose principal is granted op
// in every namespace (granted "*"), as operations that are not about one
// namespace (admin) need; others get 401 (with a Bearer challenge) or
// 403. The principal is in the request's context for next.
func Middleware(a *Authorizer, op Op, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := a.Request(r)
		switch {
		case p == nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="limiterd"`)
			http.Error(w, ErrUnauthenticated.Error(), http.StatusUnauthorized)
		case !p.all || p.ops&op != op:
			http.Error(w, (&DeniedError{Principal: p.name, Namespace: AllNamespaces, Op: op}).Error(), http.StatusForbidden)
		default:
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		}
	})
}

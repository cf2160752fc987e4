package middleware

import (
	"fmt"
	"net"
	"net/http"
)

// KeyFunc is the rate-limit key of an HTTP request. An error answers 400.
type KeyFunc func(r *http.Request) (string, error)

// KeyByIP is the client's IP address, the host of r.RemoteAddr (put
// middleware that trusts a proxy's X-Forwarded-For in front to change it).
func KeyByIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, nil
	}
	return host, nil
}

// KeyByHeader is the value of the request header name; a request without
// it is answered 400.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("missing header %s", name)
		}
		return v, nil
	}
}

// KeyByPath is the request's URL path.
func KeyByPath(r *http.Request) (string, error) { return r.URL.Path, nil }

// KeyByRoute is the http.ServeMux pattern that matched r (r.Pattern), or
// its path when there is none: with the middleware inside the mux's
// handlers, all the paths of one route share a key.
func KeyByRoute(r *http.Request) (string, error) {
	if r.Pattern != "" {
		return r.Pattern, nil
	}
	return r.URL.Path, nil
}

// Keys is the key made of every fn's key, joined injectively.
func Keys(fns ...KeyFunc) KeyFunc {
	plain := make([]func(*http.Request) (string, error), len(fns))
	for i, fn := range fns {
		plain[i] = fn
	}
	return keys(plain)
}

// New returns HTTP middleware that asks a whether the request's key (key)
// is within the limits, and answers 429 Too Many Requests when not.
func New(a Allower, key KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	l := newLimiter(a, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r)
			if err != nil {
				http.Error(w, "rate limit key: "+err.Error(), http.StatusBadRequest)
				return
			}
			d := l.allow(r.Context(), k)
			l.headers(&d, w.Header().Set)
			switch {
			case d.Allowed:
				next.ServeHTTP(w, r)
			case d.Err != nil:
				http.Error(w, "Rate limiter unavailable", http.StatusServiceUnavailable)
			default:
				http.Error(w, "Rate limited", http.StatusTooManyRequests)
			}
		})
	}
}

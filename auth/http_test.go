package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
)

// TestMiddleware: an admin endpoint behind Middleware serves only a
// principal granted admin in every namespace.
func TestMiddleware(t *testing.T) {
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "ops", Secret: "ops-token-0123456789", Namespaces: []string{"*"}, Ops: auth.Admin},
		{Name: "api-admin", Secret: "api-token-0123456789", Namespaces: []string{"api"}, Ops: auth.Admin},
		{Name: "all-writer", Secret: "all-token-0123456789", Namespaces: []string{"*"}, Ops: auth.Read | auth.Write},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := auth.Middleware(a, auth.Admin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(auth.FromContext(r.Context()).Name()))
	}))
	for _, c := range []struct {
		headers []string
		code    int
		body    string
	}{
		{nil, http.StatusUnauthorized, ""},
		{[]string{"Bearer wrong-wrong-wrong-wrong"}, http.StatusUnauthorized, ""},
		{[]string{"Bearer ops-token-0123456789", "Bearer ops-token-0123456789"}, http.StatusUnauthorized, ""},
		{[]string{"Bearer " + strings.Repeat("o", auth.MaxAuthorizationBytes)}, http.StatusUnauthorized, ""},
		{[]string{"Bearer api-token-0123456789"}, http.StatusForbidden, "api-admin is not granted admin"},
		{[]string{"Bearer all-token-0123456789"}, http.StatusForbidden, "all-writer is not granted admin"},
		{[]string{"Bearer ops-token-0123456789"}, http.StatusOK, "ops"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
		for _, v := range c.headers {
			r.Header.Add("Authorization", v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%.40q: %d %q; want %d %q", c.headers, w.Code, w.Body.String(), c.code, c.body)
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%.40q: 401 without a challenge", c.headers)
		}
	}
}

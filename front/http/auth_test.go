package httpfront

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/testcerts"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

const testToken = "test-token-0123456789abcdef"

// newAuthAPI serves the JSON API with authorization over TLS that
// verifies a client certificate if given: the token and CN "svc-a" may
// read and write in "default".
func newAuthAPI(t *testing.T, ca *testcerts.CA) *httptest.Server {
	t.Helper()
	h := newAuthHandler(t, node.SystemClock{})
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = ca.ServerConfig(t, false)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// newAuthHandler is the JSON API with newAuthAPI's authorization, on clk.
func newAuthHandler(t testing.TB, clk node.Clock) *Handler {
	t.Helper()
	a, err := auth.New(auth.Config{
		Tokens:     []auth.Token{{Name: "t", Secret: testToken, Namespaces: []string{"default"}, Ops: auth.Read | auth.Write}},
		Identities: []auth.Identity{{SubjectCN: "svc-a", Namespaces: []string{"default"}, Ops: auth.Read | auth.Write}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New([]node.Config{node.DefaultConfig()}, clk)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(svc.WithAuthorizer(a), WithAuthorizer(a))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestAuthHTTP: the Authorization header and the client certificate
// authenticate; 401 (with WWW-Authenticate) and 403 otherwise; several
// or oversized headers are no credential.
func TestAuthHTTP(t *testing.T) {
	ca := testcerts.NewCA(t, "limiterd test CA")
	srv := newAuthAPI(t, ca)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(certs...)}}
	}
	for _, c := range []struct {
		name    string
		certs   []tls.Certificate
		headers []string
		body    string
		want    int
	}{
		{"token", nil, []string{"Bearer " + testToken}, `{"key":"k"}`, http.StatusOK},
		{"certificate", []tls.Certificate{ca.Client(t, "svc-a", "", "").TLS(t)}, nil, `{"key":"k"}`, http.StatusOK},
		{"nothing", nil, nil, `{"key":"k"}`, http.StatusUnauthorized},
		{"other certificate", []tls.Certificate{ca.Client(t, "svc-b", "", "").TLS(t)}, nil, `{"key":"k"}`, http.StatusUnauthorized},
		{"wrong token", nil, []string{"Bearer wrong-wrong-wrong-wrong"}, `{"key":"k"}`, http.StatusUnauthorized},
		{"basic", nil, []string{"Basic dXNlcjpwYXNz"}, `{"key":"k"}`, http.StatusUnauthorized},
		{"two headers", nil, []string{"Bearer " + testToken, "Bearer " + testToken}, `{"key":"k"}`, http.StatusUnauthorized},
		{"oversized", nil, []string{"Bearer " + strings.Repeat("x", 1<<20)}, `{"key":"k"}`, http.StatusUnauthorized},
		{"other namespace", nil, []string{"Bearer " + testToken}, `{"namespace":"api","key":"k"}`, http.StatusForbidden},
		{"unknown namespace, nothing", nil, nil, `{"namespace":"api","key":"k"}`, http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+APIPrefix+"Increment", strings.NewReader(c.body))
		for _, h := range c.headers {
			req.Header.Add("Authorization", h)
		}
		resp, err := client(c.certs...).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d; want %d", c.name, resp.StatusCode, c.want)
		}
		if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 with WWW-Authenticate %q", c.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

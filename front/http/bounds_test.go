package httpfront

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// watchedBody records whether it was read.
type watchedBody struct {
	io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.Reader.Read(p)
}

func (b *watchedBody) Close() error { return nil }

// newBoundedAPI is the JSON API with the token of newAuthAPI (nil opts:
// no authorization) and opts.
func newBoundedAPI(t *testing.T, authz bool, opts ...Option) *Handler {
	t.Helper()
	n, err := node.New([]node.Config{node.DefaultConfig()}, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	if authz {
		a, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "t", Secret: testToken, Namespaces: []string{"*"}, Ops: auth.Read | auth.Write}}})
		if err != nil {
			t.Fatal(err)
		}
		svc = svc.WithAuthorizer(a)
		opts = append(opts, WithAuthorizer(a))
	}
	h, err := New(svc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// serveSized serves one Increment of body (padded to size bytes with spaces)
// with token ("" none); length -1 sends no Content-Length.
func serveSized(h *Handler, token string, size int, length int64) (*httptest.ResponseRecorder, *watchedBody) {
	b := `{"key":"k"}`
	b += strings.Repeat(" ", max(size-len(b), 0))
	body := &watchedBody{Reader: strings.NewReader(b)}
	req := httptest.NewRequest(http.MethodPost, APIPrefix+"Increment", nil)
	req.Body, req.ContentLength = body, length
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w, body
}

// TestAuthBeforeBody: without a valid token the call is answered 401
// without a byte of its body read, and its connection closed.
func TestAuthBeforeBody(t *testing.T) {
	h := newBoundedAPI(t, true)
	for _, token := range []string{"", "wrong-wrong-wrong-wrong"} {
		w, body := serveSized(h, token, 1000, 1000)
		if w.Code != http.StatusUnauthorized || body.read {
			t.Errorf("token %q: %d, body read %v; want 401 unread", token, w.Code, body.read)
		}
		if w.Header().Get("Connection") != "close" || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: headers %v", token, w.Header())
		}
	}
	if w, body := serveSized(h, testToken, 1000, 1000); w.Code != http.StatusOK || !body.read {
		t.Errorf("with the token: %d, body read %v: %s", w.Code, body.read, w.Body)
	}
}

// TestInflightBytesHTTP: a body that does not fit in the bytes in flight
// is refused 429, before it is read when its length is declared; the
// bytes are given back when a call returns.
func TestInflightBytesHTTP(t *testing.T) {
	h := newBoundedAPI(t, false, WithMaxInflightBytes(100))
	if w, body := serveSized(h, "", 200, 200); w.Code != http.StatusTooManyRequests || body.read {
		t.Errorf("a declared 200 bytes at a cap of 100: %d, body read %v; want 429 unread", w.Code, body.read)
	}
	if w, _ := serveSized(h, "", 200, -1); w.Code != http.StatusTooManyRequests {
		t.Errorf("an undeclared 200 bytes at a cap of 100: %d; want 429: %s", w.Code, w.Body)
	}
	for i := range 3 {
		if w, _ := serveSized(h, "", 80, 80); w.Code != http.StatusOK {
			t.Errorf("call %d of 80 bytes: %d: %s", i, w.Code, w.Body)
		}
		if w, _ := serveSized(h, "", 80, -1); w.Code != http.StatusOK {
			t.Errorf("call %d of 80 undeclared bytes: %d: %s", i, w.Code, w.Body)
		}
	}
}

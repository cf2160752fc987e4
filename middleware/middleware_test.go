package middleware_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/middleware"
)

var _ middleware.Allower = (*client.Client)(nil)

// scripted answers every Allow with d and remembers the requests.
type scripted struct {
	mu   sync.Mutex
	d    client.Decision
	reqs []*limiterv1.AllowRequest
}

func (s *scripted) Allow(_ context.Context, req *limiterv1.AllowRequest) client.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return s.d
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("Hello world")) })

func status(limit, remaining float64, reset time.Duration) *limiterv1.LimitStatus {
	return &limiterv1.LimitStatus{Limit: limit, Remaining: remaining, ResetAfter: durationpb.New(reset)}
}

func serveHTTP(h http.Handler, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "192.0.2.7:51234"
	h.ServeHTTP(w, r)
	return w
}

func TestHTTPHeaders(t *testing.T) {
	cases := []struct {
		name   string
		opts   []middleware.Option
		d      client.Decision
		code   int
		header map[string]string // "" means absent
	}{{
		name: "admitted",
		d:    client.Decision{Allowed: true, Limits: []*limiterv1.LimitStatus{status(100, 50, 29500*time.Millisecond)}},
		code: 200,
		header: map[string]string{
			"RateLimit-Policy": `"default";q=100;w=60`, "RateLimit": `"default";r=50;t=30`,
			"Retry-After": "", "X-Rate-Limited-For": "",
		},
	}, {
		name: "refused leaky, X-Rate-Limited-For",
		opts: []middleware.Option{middleware.WithLimits(client.Leaky(10, 10*time.Second, 0)), middleware.WithRateLimitedFor(), middleware.WithPolicyName("ip")},
		d: client.Decision{Limits: []*limiterv1.LimitStatus{status(10, 0, 779123306*time.Nanosecond)},
			RetryAfter: 779123306 * time.Nanosecond},
		code: 429,
		header: map[string]string{
			"RateLimit-Policy": `"ip";q=10;w=10`, "RateLimit": `"ip";r=0;t=1`,
			"Retry-After": "1", "X-Rate-Limited-For": "0.779123306",
		},
	}, {
		name: "refused, two limits, no X-Rate-Limited-For",
		opts: []middleware.Option{middleware.WithLimits(client.Window(5, time.Second), client.Fixed(100, time.Hour))},
		d: client.Decision{Limits: []*limiterv1.LimitStatus{status(5, 0, 200*time.Millisecond), status(100, 60.5, time.Hour)},
			RetryAfter: 1200 * time.Millisecond},
		code: 429,
		header: map[string]string{
			"RateLimit-Policy": `"default";q=5;w=1, "default-1";q=100;w=3600`,
			"RateLimit":        `"default";r=0;t=1, "default-1";r=60;t=3600`,
			"Retry-After":      "2", "X-Rate-Limited-For": "",
		},
	}, {
		name:   "never",
		opts:   []middleware.Option{middleware.WithLimits(client.Token(2, time.Minute)), middleware.WithRateLimitedFor()},
		d:      client.Decision{Never: true, Reason: "cost 5 exceeds", Limits: []*limiterv1.LimitStatus{status(2, 2, 0)}},
		code:   429,
		header: map[string]string{"RateLimit-Policy": `"default";q=2;w=60`, "Retry-After": "", "X-Rate-Limited-For": ""},
	}, {
		name:   "fail-open",
		d:      client.Decision{Allowed: true, Err: errors.New("down")},
		code:   200,
		header: map[string]string{"RateLimit-Policy": "", "RateLimit": "", "Retry-After": ""},
	}, {
		name:   "fail-closed",
		d:      client.Decision{Err: errors.New("down")},
		code:   503,
		header: map[string]string{"RateLimit-Policy": "", "RateLimit": "", "Retry-After": ""},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := middleware.New(&scripted{d: tc.d}, middleware.KeyByIP, tc.opts...)(hello)
			w := serveHTTP(h, "/api")
			if w.Code != tc.code {
				t.Errorf("status %d, want %d", w.Code, tc.code)
			}
			if (w.Code == 200) != (w.Body.String() == "Hello world") {
				t.Errorf("status %d with body %q", w.Code, w.Body)
			}
			for name, want := range tc.header {
				if got := w.Header().Get(name); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestHTTPRequest(t *testing.T) {
	s := &scripted{d: client.Decision{Allowed: true}}
	leaky := client.Leaky(10, 10*time.Second, 2*time.Second)
	h := middleware.New(s, middleware.Keys(middleware.KeyByIP, middleware.KeyByPath),
		middleware.WithNamespace("web"), middleware.WithLimits(leaky), middleware.WithCost(2))(hello)
	serveHTTP(h, "/api")
	req := s.reqs[0]
	if req.GetNamespace() != "web" || req.GetKey() != "9:192.0.2.74:/api" || req.GetCost() != 2 ||
		len(req.GetLimits()) != 1 || req.GetLimits()[0].GetLeaky().GetWaitTimeout().AsDuration() != 2*time.Second {
		t.Errorf("request %v", req)
	}
}

func TestKeys(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/a", nil)
	r.Header.Set("X-A", "x:1")
	r.Header.Set("X-B", "2")
	r2 := httptest.NewRequest(http.MethodGet, "/a", nil)
	r2.Header.Set("X-A", "x")
	r2.Header.Set("X-B", ":12")
	k := middleware.Keys(middleware.KeyByHeader("X-A"), middleware.KeyByHeader("X-B"))
	k1, err1 := k(r)
	k2, err2 := k(r2)
	if err1 != nil || err2 != nil || k1 == k2 {
		t.Errorf("keys %q (%v) and %q (%v), want two distinct keys", k1, err1, k2, err2)
	}
	if _, err := k(httptest.NewRequest(http.MethodGet, "/a", nil)); err == nil {
		t.Error("KeyByHeader without the header: no error")
	}
}

func TestKeyErrorIs400(t *testing.T) {
	s := &scripted{d: client.Decision{Allowed: true}}
	w := serveHTTP(middleware.New(s, middleware.KeyByHeader("X-Api-Key"))(hello), "/")
	if w.Code != http.StatusBadRequest || len(s.reqs) != 0 {
		t.Errorf("status %d after %d calls, want 400 and none", w.Code, len(s.reqs))
	}
}

func TestKeyByRoute(t *testing.T) {
	s := &scripted{d: client.Decision{Allowed: true}}
	mw := middleware.New(s, middleware.KeyByRoute)
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", mw(hello))
	serveHTTP(mux, "/users/1")
	serveHTTP(mux, "/users/2")
	if len(s.reqs) != 2 || s.reqs[0].GetKey() != "GET /users/{id}" || s.reqs[1].GetKey() != s.reqs[0].GetKey() {
		t.Errorf("requests %v", s.reqs)
	}
}

// TestHTTPLimiterdDown puts a real Client of a stopped limiterd behind the
// middleware: fail-open passes the request on, fail-closed answers 503.
func TestHTTPLimiterdDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		opts []client.Option
		code int
	}{{nil, http.StatusOK}, {[]client.Option{client.WithFailClosed()}, http.StatusServiceUnavailable}} {
		c, err := client.New(target, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		w := serveHTTP(middleware.New(c, middleware.KeyByIP)(hello), "/api")
		c.Close()
		if w.Code != tc.code || w.Header().Get("RateLimit") != "" {
			t.Errorf("status %d, RateLimit %q; want %d and no header", w.Code, w.Header().Get("RateLimit"), tc.code)
		}
	}
}

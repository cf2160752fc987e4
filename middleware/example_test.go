package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/middleware"
)

// twoPerKey is a stand-in for a *client.Client: it admits two requests
// per key.
type twoPerKey map[string]float64

func (m twoPerKey) Allow(_ context.Context, req *limiterv1.AllowRequest) client.Decision {
	st := &limiterv1.LimitStatus{Limit: 2, ResetAfter: durationpb.New(1500 * time.Millisecond)}
	if m[req.GetKey()] >= 2 {
		return client.Decision{Limits: []*limiterv1.LimitStatus{st}, RetryAfter: 1500 * time.Millisecond}
	}
	m[req.GetKey()]++
	st.Remaining = 2 - m[req.GetKey()]
	return client.Decision{Allowed: true, Limits: []*limiterv1.LimitStatus{st}}
}

func ExampleNew() {
	limit := middleware.New(twoPerKey{}, middleware.KeyByIP,
		middleware.WithLimits(client.Window(2, time.Minute)),
		middleware.WithRateLimitedFor())
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "Hello world") }))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api", nil))
		fmt.Printf("%d RateLimit-Policy: %s RateLimit: %s Retry-After: %q X-Rate-Limited-For: %q\n", w.Code,
			w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"),
			w.Header().Get("Retry-After"), w.Header().Get("X-Rate-Limited-For"))
	}
	// Output:
	// 200 RateLimit-Policy: "default";q=2;w=60 RateLimit: "default";r=1;t=2 Retry-After: "" X-Rate-Limited-For: ""
	// 200 RateLimit-Policy: "default";q=2;w=60 RateLimit: "default";r=0;t=2 Retry-After: "" X-Rate-Limited-For: ""
	// 429 RateLimit-Policy: "default";q=2;w=60 RateLimit: "default";r=0;t=2 Retry-After: "2" X-Rate-Limited-For: "1.5"
}

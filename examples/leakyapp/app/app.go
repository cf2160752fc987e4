// Package app is the web app of Sidekiq's leaky-bucket example: GET /api
// answers "Hello world", each client IP limited by a leaky bucket of 10
// drops draining over 10 s, refusals answered 429 with X-Rate-Limited-For.
package app

import (
	"net/http"
	"time"

	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/middleware"
)

// KeyByIP is Sidekiq's "ip-#{remote_ip}".
func KeyByIP(r *http.Request) (string, error) {
	ip, err := middleware.KeyByIP(r)
	return "ip-" + ip, err
}

// New returns the app's handler, limited through a.
func New(a middleware.Allower) http.Handler {
	limit := middleware.New(a, KeyByIP,
		middleware.WithLimits(client.Leaky(10, 10*time.Second, 0)), // wait_timeout: 0
		middleware.WithPolicyName("ip"),
		middleware.WithRateLimitedFor())
	mux := http.NewServeMux()
	mux.Handle("GET /api", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("Hello world"))
	})))
	return mux
}

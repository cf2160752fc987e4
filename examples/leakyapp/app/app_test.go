package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/examples/leakyapp/app"
)

// refuse refuses every request, as a full bucket does, and keeps the last
// request.
type refuse struct{ req *limiterv1.AllowRequest }

func (r *refuse) Allow(_ context.Context, req *limiterv1.AllowRequest) client.Decision {
	r.req = req
	return client.Decision{RetryAfter: 250 * time.Millisecond, Limits: []*limiterv1.LimitStatus{{Limit: 10}}}
}

func TestApp(t *testing.T) {
	a := &refuse{}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/api", nil)
	r.RemoteAddr = "[2001:db8::1]:4000"
	app.New(a).ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("X-Rate-Limited-For") != "0.25" || w.Header().Get("Retry-After") != "1" {
		t.Errorf("%d %v", w.Code, w.Header())
	}
	leaky := a.req.GetLimits()[0].GetLeaky()
	if a.req.GetKey() != "ip-2001:db8::1" || leaky.GetSize() != 10 || leaky.GetInterval().AsDuration() != 10*time.Second || leaky.GetWaitTimeout() != nil {
		t.Errorf("request %v", a.req)
	}
}

package main

import (
	"net/http"

	httpfront "github.com/limiterd/limiterd/front/http"
	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/service"
)

// mountHTTPAPI mounts the JSON API (every RPC at
// POST /limiter.v1.RateLimiter/<Method>) and its OpenAPI document
// (GET /openapi.json) on the HTTP listener's mux. Its calls are stopped
// with the fronts, by the handler's Shutdown, not with the listener.
// The calls are recorded in the metrics it returns.
func (d *daemon) mountHTTPAPI(mux *http.ServeMux) (*httpfront.Handler, *reqmetrics.Metrics, error) {
	m := httpfront.NewMetrics(d.reg, d.configured)
	cc, _ := d.connections()
	api, err := httpfront.New(d.svc.Observe(service.FrontHTTP, m), append(d.httpAuth(), httpfront.WithLogger(d.log),
		httpfront.WithMaxInflightBytes(cc.MaxInflightBytes))...)
	if err != nil {
		return nil, nil, err
	}
	api.RegisterWithMetrics(mux, m)
	return api, m, nil
}

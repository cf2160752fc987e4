package reqmetrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/service"
)

// A front records each call and each decision; a namespace that is not
// configured is counted as "other", so callers cannot grow the series.
func Example() {
	reg := prometheus.NewRegistry()
	m := reqmetrics.New(reg, reqmetrics.Config{
		Front:      "grpc",
		Methods:    reqmetrics.LimiterMethods(),
		Configured: func(name string) bool { return name == "api" },
	})
	m.Method("limiter.v1.RateLimiter/Allow").Observe(80*time.Microsecond, "OK")
	m.Decision("api", service.SlidingWindow, true)
	m.Decision("made-up-by-a-caller", service.SlidingWindow, false)

	n, _ := testutil.GatherAndCount(reg, "limiterd_decisions_total")
	fmt.Println("decision series:", n) // every kind and decision of "api" and "other"
	// Output: decision series: 36
}

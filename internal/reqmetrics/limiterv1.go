package reqmetrics

import (
	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// LimiterMethods are the limiter.v1.RateLimiter methods as the fronts
// serving that API label them: "limiter.v1.RateLimiter/Allow" (a gRPC
// full method, or an HTTP path, without its leading slash).
func LimiterMethods() []string {
	sd := limiterv1.RateLimiter_ServiceDesc
	out := make([]string, 0, len(sd.Methods))
	for _, md := range sd.Methods {
		out = append(out, sd.ServiceName+"/"+md.MethodName)
	}
	return out
}

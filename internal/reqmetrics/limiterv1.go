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

// LimiterDecisions records the decisions of one limiter.v1 call: req is
// its request and resp its response (nil when the call failed). Allow and
// Acquire count one decision, AllowBatch and AcquireBatch one per item
// that was decided (an item that failed counts none); other calls decide
// nothing.
func (m *Metrics) LimiterDecisions(req, resp any) {
	switch req := req.(type) {
	case *limiterv1.AllowRequest:
		if r, ok := resp.(*limiterv1.AllowResponse); ok && r != nil {
			m.Decision(req.GetNamespace(), limitsKind(req.GetLimits()), r.GetAllowed())
		}
	case *limiterv1.AcquireRequest:
		if r, ok := resp.(*limiterv1.AcquireResponse); ok && r != nil {
			m.Decision(req.GetNamespace(), Concurrency, r.GetAcquired())
		}
	case *limiterv1.AllowBatchRequest:
		r, ok := resp.(*limiterv1.AllowBatchResponse)
		if !ok || r == nil {
			return
		}
		items, results := req.GetItems(), r.GetResults()
		for i := range min(len(items), len(results)) {
			if d := results[i].GetResponse(); d != nil {
				m.Decision(items[i].GetNamespace(), limitsKind(items[i].GetLimits()), d.GetAllowed())
			}
		}
	case *limiterv1.AcquireBatchRequest:
		r, ok := resp.(*limiterv1.AcquireBatchResponse)
		if !ok || r == nil {
			return
		}
		items, results := req.GetItems(), r.GetResults()
		for i := range min(len(items), len(results)) {
			if d := results[i].GetResponse(); d != nil {
				m.Decision(items[i].GetNamespace(), Concurrency, d.GetAcquired())
			}
		}
	}
}

// limitsKind is the kind of an Allow's limits: Mixed when they are of
// several kinds (a sliding window when there are none: the service
// refuses such an Allow as a sliding window's).
func limitsKind(limits []*limiterv1.Limit) Kind {
	k, first := SlidingWindow, true
	for _, l := range limits {
		lk := SlidingWindow
		switch {
		case l.GetToken() != nil:
			lk = TokenBucket
		case l.GetLeaky() != nil:
			lk = LeakyBucket
		case l.GetFixed() != nil:
			lk = FixedBucket
		}
		if first {
			k, first = lk, false
		} else if lk != k {
			return Mixed
		}
	}
	return k
}

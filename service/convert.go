package service

import (
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

// The service's value types have the engine's layout, field for field
// (TestEngineLayouts), so that a call passes its limits to the engine,
// and the engine writes rates and statuses into the front's slices,
// without a copy or an allocation on the hot path. A change of the
// engine's types fails that test; then these functions copy instead.

func engineLimits(ls []Limit) []ratelimit.Limit {
	return unsafe.Slice((*ratelimit.Limit)(unsafe.Pointer(unsafe.SliceData(ls))), len(ls))
}

func engineRates(rs []Rate) []ratelimit.Rate {
	return unsafe.Slice((*ratelimit.Rate)(unsafe.Pointer(unsafe.SliceData(rs))), cap(rs))[:len(rs)]
}

func serviceRates(rs []ratelimit.Rate) []Rate {
	return unsafe.Slice((*Rate)(unsafe.Pointer(unsafe.SliceData(rs))), cap(rs))[:len(rs)]
}

func engineStatuses(ss []LimitStatus) []ratelimit.LimitStatus {
	return unsafe.Slice((*ratelimit.LimitStatus)(unsafe.Pointer(unsafe.SliceData(ss))), cap(ss))[:len(ss)]
}

// serviceDecision copies d's fields: the service's Decision has fields
// of its own after the engine's (a dry run's).
func serviceDecision(d ratelimit.Decision) Decision {
	return Decision{Allowed: d.Allowed, Limits: serviceStatuses(d.Limits), RetryAfter: d.RetryAfter,
		Never: d.Never, Reason: d.Reason, Wait: d.Wait, WouldAllow: d.Allowed, At: d.At}
}

func serviceStatuses(ss []ratelimit.LimitStatus) []LimitStatus {
	return unsafe.Slice((*LimitStatus)(unsafe.Pointer(unsafe.SliceData(ss))), cap(ss))[:len(ss)]
}

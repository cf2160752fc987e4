// Package reqmetrics holds the request metrics every front records: calls
// and their latency by method and result code, and limit decisions
// (allowed, denied, or dry_run_denied: a dry run its limits refused) by
// namespace and limiter kind.
//
// Series stay bounded whatever callers send. A method gets its own series
// only when it is one of Config.Methods (else "other"); a code must come
// from a front's fixed vocabulary (gRPC code names, HTTP statuses, "ok" or
// "error"); a namespace gets its own label value only when
// Config.Configured says it is configured (else "other"); keys are never
// labels. The namespace label is limiter_namespace, not namespace, which
// Kubernetes scrapes set to the pod's namespace.
//
// Each front makes its Metrics with New, on a Registerer passed in, with
// the constant label front="grpc", "http", "resp" or "envoy"; several
// fronts register the same families on one registry.
//
// A configured namespace named "other" shares its label value with the
// unconfigured ones.
//
// The fronts make their Metrics themselves: grpcfront.NewMetrics with
// grpcfront.UnaryMetrics, httpfront.NewMetrics with httpfront.Metrics,
// front/resp on the registry its New is given, and front/envoy through
// (*envoyfront.Server).ObserveDecisions.
//
// RegisterBuildInfo adds limiterd_build_info.
package reqmetrics

// Package telemetry sets up OpenTelemetry tracing for limiterd: Setup
// makes a TracerProvider that exports spans over OTLP/gRPC to a
// collector, or a no-op one when no endpoint is configured (tracing is
// off by default); ServerOption traces a gRPC server's calls with it.
// Store round trips get their spans from internal/storetrace, children of
// the calls' server spans.
//
// Nothing here sets OpenTelemetry's global providers or propagators: the
// provider is passed to what uses it.
package telemetry

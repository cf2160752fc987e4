package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	envoyfront "github.com/limiterd/limiterd/front/envoy"
)

// EnvoyConfig turns on Envoy's rate limit service on the gRPC listener,
// with envoyproxy/ratelimit's domain files.
type EnvoyConfig struct {
	// ConfigDir holds the domain files (*.yaml, *.yml); empty turns the
	// service off.
	ConfigDir string `yaml:"config_dir"`
	// Namespace the limits count in (default "default"); its window sizes
	// must include every unit the files use: 1s, 1m, 1h, 24h, and 168h,
	// 720h, 8760h for week, month, year.
	Namespace string `yaml:"namespace"`
	// PollInterval is how often the directory is checked for changes
	// (default 1s).
	PollInterval Duration `yaml:"poll_interval"`
	// StopIncrementWhenOverLimit does not count refused hits
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	StopIncrementWhenOverLimit bool `yaml:"stop_increment_when_over_limit"`
	// ResponseHeaders adds rate limit headers to Envoy's responses.
	ResponseHeaders EnvoyHeaders `yaml:"response_headers"`
	// NearLimitRatio is where the near_limit metric starts (default 0.8).
	NearLimitRatio float64 `yaml:"near_limit_ratio"`
	// MergeDomainConfig merges the files that define one domain
	// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); off, a domain in two
	// files is refused.
	MergeDomainConfig bool `yaml:"merge_domain_config"`
}

// EnvoyHeaders are the response headers (envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED); names default to x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset.
type EnvoyHeaders struct {
	Enabled   bool   `yaml:"enabled"`
	Limit     string `yaml:"limit"`
	Remaining string `yaml:"remaining"`
	Reset     string `yaml:"reset"`
}

// defaultEnvoyPoll is how often the rules directory is checked by default.
const defaultEnvoyPoll = time.Second

// FrontConfig is c in the front's terms.
func (c EnvoyConfig) FrontConfig() envoyfront.Config {
	return envoyfront.Config{
		Dir: c.ConfigDir, Namespace: c.Namespace, StopIncrementWhenOverLimit: c.StopIncrementWhenOverLimit,
		ResponseHeaders: c.ResponseHeaders.Enabled, LimitHeader: c.ResponseHeaders.Limit,
		RemainingHeader: c.ResponseHeaders.Remaining, ResetHeader: c.ResponseHeaders.Reset,
		NearLimitRatio: c.NearLimitRatio, MergeDomainConfig: c.MergeDomainConfig,
	}
}

// validate checks the envoy section against the namespaces; the files
// themselves are read at start.
func (c EnvoyConfig) validate(namespaces []string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Field: "envoy." + field, Reason: fmt.Sprintf(format, args...)})
	}
	if c.ConfigDir == "" { // off; the flag may yet give a directory
		return nil
	}
	ns := c.Namespace
	if ns == "" {
		ns = "default"
	}
	if !slices.Contains(namespaces, ns) {
		bad("namespace", "namespace %q is not configured", ns)
	}
	if c.PollInterval < 0 {
		bad("poll_interval", "must not be negative, got %s", c.PollInterval)
	}
	for _, h := range []struct{ field, name string }{{"limit", c.ResponseHeaders.Limit},
		{"remaining", c.ResponseHeaders.Remaining}, {"reset", c.ResponseHeaders.Reset}} {
		if h.name != "" && !headerName(h.name) {
			bad("response_headers."+h.field, "must be an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~), got %q", h.name)
		}
	}
	if !(c.NearLimitRatio >= 0 && c.NearLimitRatio <= 1) {
		bad("near_limit_ratio", "must be between 0 and 1, got %g", c.NearLimitRatio)
	}
	return errors.Join(errs...)
}

// Poll is the configured poll interval, or its default.
func (c EnvoyConfig) Poll() time.Duration {
	if c.PollInterval == 0 {
		return defaultEnvoyPoll
	}
	return time.Duration(c.PollInterval)
}

// headerName reports whether s is an HTTP header name (RFC 9110 token).
func headerName(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return s != ""
}

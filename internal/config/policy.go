package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// PolicyConfig is a namespace's named policy: the limits an Allow naming
// it checks, written as the API's Limit messages are (snake_case fields,
// durations as strings), and whether its calls are dry runs.
//
//	policies:
//	  login:
//	    limits:
//	      - {window_size: 60s, limit: 5}
//	      - {token: {max: 10, refill_time: 1m, refill_amount: 1}}
//	    shadow: false
type PolicyConfig struct {
	Limits []LimitConfig `yaml:"limits"`
	// Shadow makes the Allow calls naming the policy dry runs.
	Shadow bool `yaml:"shadow"`
}

// LimitConfig is one limit of a policy: a sliding window (window_size
// and limit), or one bucket (token, leaky or fixed).
type LimitConfig struct {
	WindowSize Duration           `yaml:"window_size"`
	Limit      float64            `yaml:"limit"`
	Token      *TokenBucketConfig `yaml:"token"`
	Leaky      *LeakyBucketConfig `yaml:"leaky"`
	Fixed      *FixedBucketConfig `yaml:"fixed"`
}

// TokenBucketConfig is a token bucket (the API's TokenBucket).
type TokenBucketConfig struct {
	Max          float64  `yaml:"max"`
	RefillTime   Duration `yaml:"refill_time"`
	RefillAmount float64  `yaml:"refill_amount"`
	Strict       bool     `yaml:"strict"`
}

// LeakyBucketConfig is a leaky bucket (the API's LeakyBucket).
type LeakyBucketConfig struct {
	Size        float64  `yaml:"size"`
	Interval    Duration `yaml:"interval"`
	WaitTimeout Duration `yaml:"wait_timeout"`
}

// FixedBucketConfig is a fixed bucket (the API's FixedBucket).
type FixedBucketConfig struct {
	Period Duration `yaml:"period"`
	Limit  float64  `yaml:"limit"`
}

// nodePolicies returns ps as the engine's policies, which node.Config's
// Validate checks. A limit with several kinds set keeps the first of
// token, leaky and fixed (validatePolicies refuses it).
func nodePolicies(ps map[string]PolicyConfig) map[string]ratelimit.Policy {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]ratelimit.Policy, len(ps))
	for name, p := range ps {
		np := ratelimit.Policy{Shadow: p.Shadow, Limits: make([]ratelimit.Limit, len(p.Limits))}
		for i, l := range p.Limits {
			nl := ratelimit.Limit{Size: time.Duration(l.WindowSize), Limit: l.Limit}
			if l.Token != nil {
				nl.Kind, nl.Strict = ratelimit.TokenLimit, l.Token.Strict
				nl.Token = ratelimit.TokenBucket{Max: l.Token.Max, RefillTime: time.Duration(l.Token.RefillTime), RefillAmount: l.Token.RefillAmount}
			}
			if l.Leaky != nil {
				if nl.Kind == ratelimit.WindowLimit {
					nl.Kind, nl.WaitTimeout = ratelimit.LeakyLimit, time.Duration(l.Leaky.WaitTimeout)
					nl.Leaky = ratelimit.LeakyBucket{Size: l.Leaky.Size, Interval: time.Duration(l.Leaky.Interval)}
				}
			}
			if l.Fixed != nil {
				if nl.Kind == ratelimit.WindowLimit {
					nl.Kind = ratelimit.FixedLimit
					nl.Fixed = ratelimit.FixedBucket{Period: time.Duration(l.Fixed.Period), Limit: l.Fixed.Limit}
				}
			}
			np.Limits[i] = nl
		}
		out[name] = np
	}
	return out
}

// validatePolicies refuses a policy limit with more than one bucket kind
// set, which the engine's Limit cannot hold; the rest of a policy is
// node.Config's to check.
func validatePolicies(field string, ps map[string]PolicyConfig) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		for i, l := range ps[name].Limits {
			var set []string
			for _, k := range []struct {
				name string
				on   bool
			}{{"token", l.Token != nil}, {"leaky", l.Leaky != nil}, {"fixed", l.Fixed != nil}} {
				if k.on {
					set = append(set, k.name)
				}
			}
			if len(set) > 1 {
				errs = append(errs, &Error{Field: fmt.Sprintf("%s.policies.%s.limits[%d]", field, name, i),
					Reason: fmt.Sprintf("a limit is one kind: set one of token, leaky or fixed (or window_size and limit), got %s", strings.Join(set, " and "))})
			}
		}
	}
	return errs
}

package envoyfront

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The example configurations of envoyproxy/ratelimit's README, as they
// are.
var readmeExamples = map[string]string{
	"example1.yaml": `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`,
	"example2.yaml": `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
	"example3.yaml": `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
	"example4.yaml": `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`,
	"example5.yaml": `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`,
	"example6.yaml": `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`,
	"example7.yaml": `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`,
	"example8.yaml": `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
	"example9.yml": `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
}

const (
	second  = rlsv3.RateLimitResponse_RateLimit_SECOND
	minUnit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	day     = rlsv3.RateLimitResponse_RateLimit_DAY
	hour    = rlsv3.RateLimitResponse_RateLimit_HOUR
)

func TestReadmeExamples(t *testing.T) {
	s := newTestServer(t, Config{}, readmeExamples)

	t.Run("1 two values of one key", func(t *testing.T) {
		check(t, "users ×500", s.call(t, "mongo_cps", 500, desc("database", "users")), ok, stat{ok, 500, second, 0})
		check(t, "users once more", s.call(t, "mongo_cps", 0, desc("database", "users")), over, stat{over, 500, second, 0})
		check(t, "default", s.call(t, "mongo_cps", 0, desc("database", "default")), ok, stat{ok, 500, second, 499})
		check(t, "an unlisted value", s.call(t, "mongo_cps", 0, desc("database", "other")), ok, stat{code: ok})
	})

	t.Run("2 nested descriptors and a value-less key", func(t *testing.T) {
		marketing := desc("message_type", "marketing", "to_number", "2061111111")
		for i := range 5 {
			check(t, "marketing", s.call(t, "messaging", 1, marketing), ok, stat{ok, 5, day, uint32(4 - i)})
		}
		check(t, "6th marketing with the number's own limit", s.call(t, "messaging", 1, marketing, desc("to_number", "2061111111")),
			over, stat{over, 5, day, 0}, stat{ok, 100, day, 99})
		// Every number has its own counters.
		check(t, "another number", s.call(t, "messaging", 1, desc("message_type", "marketing", "to_number", "2062222222")), ok, stat{ok, 5, day, 4})
		check(t, "another message type", s.call(t, "messaging", 1, desc("message_type", "other", "to_number", "2061111111")), ok, stat{code: ok})
	})

	t.Run("3 the most specific match", func(t *testing.T) {
		check(t, "banned address", s.call(t, "edge_proxy_per_ip", 1, desc("remote_address", "50.0.0.5")), over, stat{over, 0, second, 0})
		check(t, "other address", s.call(t, "edge_proxy_per_ip", 1, desc("remote_address", "50.0.0.1")), ok, stat{ok, 10, second, 9})
	})

	t.Run("4 levels must match", func(t *testing.T) {
		check(t, "two entries", s.call(t, "example4", 1, desc("key", "value", "subkey", "subvalue")), ok, stat{code: ok})
		check(t, "one entry", s.call(t, "example4", 1, desc("key", "value")), ok, stat{ok, 300, second, 299})
	})

	t.Run("5 unlimited", func(t *testing.T) {
		for range 3 {
			check(t, "ldap", s.call(t, "internal", 1000, desc("ldap", "x")), ok, stat{code: ok, remaining: math.MaxUint32})
		}
		check(t, "azure", s.call(t, "internal", 1, desc("azure", "x")), ok, stat{ok, 100, minUnit, 99})
		if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "internal", "descriptor": "ldap"}); got != 3000 {
			t.Errorf("ldap hits = %g, want 3000", got)
		}
	})

	t.Run("6 shadow mode", func(t *testing.T) {
		for i := range 11 {
			resp := s.call(t, "example6", 1, desc("service", "auth-service", "user", "user-a"))
			check(t, "user-a", resp, ok, stat{ok, 10, second, uint32(max(0, 9-i))})
		}
		labels := map[string]string{"domain": "example6", "descriptor": "service.user_user-a"}
		if got := s.counter(t, "limiterd_envoy_rule_shadow_mode_total", labels); got != 1 {
			t.Errorf("user-a shadow_mode = %g, want 1", got)
		}
		if got := s.counter(t, "limiterd_envoy_rule_over_limit_total", labels); got != 1 {
			t.Errorf("user-a over_limit = %g, want 1", got)
		}
		check(t, "user-b ×20", s.call(t, "example6", 20, desc("service", "auth-service", "user", "user-b")), ok, stat{ok, 20, second, 0})
		check(t, "user-b 21st", s.call(t, "example6", 1, desc("service", "auth-service", "user", "user-b")), over, stat{over, 20, second, 0})
	})

	t.Run("7 replaces", func(t *testing.T) {
		one, two := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
		for i := range 6 {
			// The 5/s limit is replaced: neither checked nor counted.
			check(t, "both", s.call(t, "example7", 1, one, two), ok, stat{code: ok}, stat{ok, 10, second, uint32(9 - i)})
		}
		check(t, "key_1 alone", s.call(t, "example7", 1, one), ok, stat{ok, 5, second, 4})
		check(t, "key_2 alone", s.call(t, "example7", 4, two), ok, stat{ok, 10, second, 0})
		check(t, "key_2 over", s.call(t, "example7", 1, two), over, stat{over, 10, second, 0})
	})

	t.Run("8 detailed metric", func(t *testing.T) {
		check(t, "unspecified", s.call(t, "example8", 1, desc("key1", "unspecified_value")), ok, stat{ok, 10, minUnit, 9})
		check(t, "value1", s.call(t, "example8", 1, desc("key1", "value1")), ok, stat{ok, 20, minUnit, 19})
		for path, want := range map[string]float64{"key1_unspecified_value": 1, "key1_value1": 1, "key1": 0} {
			if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "example8", "descriptor": path}); got != want {
				t.Errorf("hits of %s = %g, want %g", path, got, want)
			}
		}
	})

	t.Run("9 wildcard", func(t *testing.T) {
		check(t, "value_1", s.call(t, "example9", 1, desc("key1", "value_1")), ok, stat{ok, 20, minUnit, 19})
		check(t, "value_2: its own counter", s.call(t, "example9", 1, desc("key1", "value_2")), ok, stat{ok, 20, minUnit, 19})
		check(t, "no prefix", s.call(t, "example9", 1, desc("key1", "other")), ok, stat{code: ok})
		check(t, "another key", s.call(t, "example9", 1, desc("key2", "value_1")), ok, stat{code: ok})
	})

	t.Run("unknown domain", func(t *testing.T) {
		check(t, "nowhere", s.call(t, "nowhere", 1, desc("a", "b"), desc("c", "d")), ok, stat{code: ok}, stat{code: ok})
		if got := s.counter(t, "limiterd_envoy_unknown_domain_total", nil); got != 1 {
			t.Errorf("unknown domains = %g, want 1", got)
		}
		if got := s.counter(t, "limiterd_envoy_unmatched_descriptors_total", map[string]string{"domain": "mongo_cps"}); got != 1 {
			t.Errorf("unmatched descriptors of mongo_cps = %g, want 1", got)
		}
	})
}

func TestDurationUntilReset(t *testing.T) {
	s := newTestServer(t, Config{}, readmeExamples)
	s.clock.Add(20 * time.Second)
	resp := s.call(t, "internal", 1, desc("azure", "x"))
	if got := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != 40*time.Second {
		t.Errorf("duration_until_reset = %v, want 40s", got)
	}
}

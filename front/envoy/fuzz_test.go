package envoyfront

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseDomain: parsing never panics, refuses with a *RulesError, and
// every limit it accepts has one of the namespace's window sizes.
func FuzzParseDomain(f *testing.F) {
	for _, data := range readmeExamples {
		f.Add([]byte(data))
	}
	f.Add([]byte(perMinute))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: v*\n    descriptors: [{key: j, rate_limit: {unlimited: true}}]\n"))
	sizes := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, domain, err := parseDomain(data, sizes, "envoy")
		if err != nil {
			var re *RulesError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is a %T, want *RulesError", err, err)
			}
			return
		}
		if domain == "" {
			t.Fatal("accepted a file without a domain")
		}
		var walk func(n *rulesNode)
		walk = func(n *rulesNode) {
			if r := n.limit; r != nil && !r.unlimited && units[r.unit] != r.size {
				t.Fatalf("rule %s: unit %q with window size %s", r.path, r.unit, r.size)
			}
			for _, c := range n.children {
				walk(c)
			}
			for _, c := range n.wildcards {
				walk(c)
			}
		}
		walk(root)
	})
}

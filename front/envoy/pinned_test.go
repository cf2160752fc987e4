package envoyfront

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRulesWildcardDuplicates: two wildcard descriptors of the same key
// and prefix are a duplicate; the same prefix under another key, or
// another prefix under the same key, is not.
func TestRulesWildcardDuplicates(t *testing.T) {
	sizes := []time.Duration{time.Second, time.Minute}
	rule := "    rate_limit: {unit: second, requests_per_unit: 1}\n"
	for _, tc := range []struct {
		name, a, b string
		dup        bool
	}{
		{"same key and prefix", "  - key: k\n    value: v*\n", "  - key: k\n    value: v*\n", true},
		{"another key", "  - key: k\n    value: v*\n", "  - key: j\n    value: v*\n", false},
		{"another prefix", "  - key: k\n    value: v*\n", "  - key: k\n    value: w*\n", false},
	} {
		dir := t.TempDir()
		writeFile(t, dir, "d.yaml", "domain: d\ndescriptors:\n"+tc.a+rule+tc.b+rule)
		_, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, sizes)
		var re *RulesError
		switch {
		case tc.dup && (!errors.As(err, &re) || !strings.Contains(err.Error(), "descriptors[1]") || !strings.Contains(err.Error(), "duplicate descriptor")):
			t.Errorf("%s: error %v, want descriptors[1] named a duplicate", tc.name, err)
		case !tc.dup && err != nil:
			t.Errorf("%s: %v, want the rules loaded", tc.name, err)
		}
	}
}

// TestRulesCountFiles: a rules directory counts its domain files (the
// load's log line says how many), not the other files beside them.
func TestRulesCountFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: a\n")
	writeFile(t, dir, "b.yml", "domain: b\n")
	writeFile(t, dir, "notes.txt", "not: [yaml")
	rs, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, []time.Duration{time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rs.files != 2 || len(rs.domains) != 2 {
		t.Errorf("loaded %d files, %d domains; want 2 and 2", rs.files, len(rs.domains))
	}
}

// TestConfigNearLimitRatioBounds: near_limit_ratio takes 0 and 1, both
// ends included, and nothing outside.
func TestConfigNearLimitRatioBounds(t *testing.T) {
	for r, ok := range map[float64]bool{0: true, 0.8: true, 1: true, -0.01: false, 1.01: false} {
		err := Config{Dir: "d", NearLimitRatio: r}.Validate()
		if (err == nil) != ok {
			t.Errorf("near_limit_ratio %g: %v; want accepted %v", r, err, ok)
		}
	}
}

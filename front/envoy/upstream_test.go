package envoyfront

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// testdata/upstream holds one directory of domain files per rule of
// envoyproxy/ratelimit's loader (at f2fb157): loads-* load, refused-* are
// refused, merge-* load or not by merge_domain_config. Each has a test
// here; cmd/limiterd's TestCheckAgreesWithStart gives check each of them
// too.
const upstreamDir = "testdata/upstream"

// fixture reads the files of one directory of testdata/upstream.
func fixture(t *testing.T, name string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(upstreamDir, name))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, de := range ents {
		b, err := os.ReadFile(filepath.Join(upstreamDir, name, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[de.Name()] = string(b)
	}
	return files
}

// fixtureServer serves one directory of testdata/upstream in a namespace
// with every unit's window size.
func fixtureServer(t *testing.T, name string, cfg Config) *testServer {
	t.Helper()
	return newTestServerSizes(t, cfg, fixture(t, name), allSizes)
}

// Every fixture has its test.
func TestUpstreamFixturesTested(t *testing.T) {
	tested := map[string]bool{
		"loads-share-threshold": true, "loads-metadata": true, "loads-quota-mode": true, "loads-value-to-metric": true,
		"loads-wildcards": true, "loads-long-units": true, "loads-upstream-leniency": true,
		"merge-domain": true, "merge-duplicate-descriptor": true,
	}
	for name := range upstreamRefusals {
		tested[name] = true
	}
	ents, err := os.ReadDir(upstreamDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if !tested[de.Name()] {
			t.Errorf("%s/%s has no test", upstreamDir, de.Name())
		}
		delete(tested, de.Name())
	}
	for name := range tested {
		t.Errorf("a test of %s, which is not in %s", name, upstreamDir)
	}
}

// upstreamRefusals are the files upstream's loader refuses: the file, the
// field and words of the reason limiterd gives.
var upstreamRefusals = map[string]struct {
	file, field string
	line        int
	reason      []string
}{
	"refused-bad-yaml":      {"bad.yaml", "", 3, []string{"did not find expected"}},
	"refused-empty-domain":  {"d.yaml", "domain", 1, []string{"is required"}},
	"refused-empty-key":     {"d.yaml", "descriptors[0].key", 3, []string{"is required"}},
	"refused-duplicate-key": {"d.yaml", "descriptors[1]", 5, []string{`duplicate descriptor "key1_value1"`, "first at descriptors[0]"}},
	"refused-composite-key": {"d.yaml", "descriptors[1]", 7, []string{`key "a" and value "b_c"`, `composite key "a_b_c"`, `key "a_b" and value "c"`}},
	"refused-bad-unit":      {"d.yaml", "descriptors[0].rate_limit.unit", 6, []string{"must be second, minute, hour, day, week, month or year", `got "foo"`}},
	"refused-no-unit":       {"d.yaml", "descriptors[0].rate_limit.unit", 4, []string{`got ""`}},
	"refused-unlimited-with-unit": {"d.yaml", "descriptors[0].rate_limit.unit", 6,
		[]string{"an unlimited rate_limit takes no unit"}},
	"refused-replaces-empty": {"d.yaml", "descriptors[0].descriptors[0].rate_limit.replaces[0].name", 10, []string{"is required"}},
	"refused-replaces-self": {"d.yaml", "descriptors[0].descriptors[0].rate_limit.replaces[0].name", 10,
		[]string{`names this rate_limit itself ("self")`}},
	"refused-misspelled-field":               {"d.yaml", "descriptors[0].ratelimit", 5, []string{"unknown field"}},
	"refused-misspelled-field-in-rate-limit": {"d.yaml", "descriptors[0].rate_limit.requestsperunit", 7, []string{"unknown field"}},
	"refused-non-string-key":                 {"d.yaml", "", 1, []string{"key 0.25 is not a string"}},
	"refused-non-map-list":                   {"d.yaml", "descriptors[0]", 3, []string{"must be a mapping"}},
	"refused-float":                          {"d.yaml", "descriptors[0].value", 4, []string{"1.5 is a float", "quote it"}},
	"refused-int-beyond-64-bits":             {"d.yaml", "descriptors[0].value", 4, []string{"9223372036854775808 does not fit in 64 bits"}},
	"refused-bad-count":                      {"d.yaml", "descriptors[0].rate_limit.requests_per_unit", 6, []string{"cannot unmarshal", "-1", "uint32"}},
	"refused-share-threshold-without-wildcard": {"d.yaml", "descriptors[0].share_threshold", 5,
		[]string{"only for a wildcard value", `"files/a"`}},
	"refused-metadata-not-a-mapping": {"d.yaml", "descriptors[0].metadata", 4, []string{"cannot unmarshal !!seq"}},
	"refused-quoted-boolean":         {"d.yaml", "descriptors[0].shadow_mode", 5, []string{`must be true or false, got the string "yes"`}},
	// A departure: upstream keeps the last of a repeated key.
	"refused-key-twice": {"d.yaml", "descriptors[0].rate_limit", 8, []string{"given twice (first on line 5)"}},
}

// Each file upstream refuses is refused, naming the file, the line, the
// field and why.
func TestUpstreamRefusals(t *testing.T) {
	for name, want := range upstreamRefusals {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(upstreamDir, name)
			_, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, allSizes)
			re, ok := errors.AsType[*RulesError](err)
			if !ok {
				t.Fatalf("error %v (%T), want a *RulesError", err, err)
			}
			if re.File != filepath.Join(dir, want.file) || re.Field != want.field || re.Line != want.line {
				t.Errorf("file %s, line %d, field %q; want %s, %d, %q", re.File, re.Line, re.Field, filepath.Join(dir, want.file), want.line, want.field)
			}
			for _, w := range want.reason {
				if !strings.Contains(re.Error(), w) {
					t.Errorf("%q does not say %q", re.Error(), w)
				}
			}
			if !strings.HasPrefix(re.Error(), "envoy rules "+filepath.Join(dir, want.file)+":"+strconv.Itoa(want.line)+": ") {
				t.Errorf("%q does not begin with the file and line", re.Error())
			}
		})
	}
}

// share_threshold: three values matching files/* at 3 a minute share one
// counter, so the fourth call, of any of them, is over the limit; a
// wildcard without it counts each value apart.
func TestShareThreshold(t *testing.T) {
	s := fixtureServer(t, "loads-share-threshold", Config{})
	for i, v := range []string{"files/a", "files/b", "files/c"} {
		check(t, v, s.call(t, "share", 1, desc("path", v)), ok, stat{ok, 3, minUnit, uint32(2 - i)})
	}
	for _, v := range []string{"files/b", "files/a", "files/new"} {
		check(t, v+" after three", s.call(t, "share", 1, desc("path", v)), over, stat{over, 3, minUnit, 0})
	}
	for i := range 3 {
		check(t, "docs/a", s.call(t, "share", 1, desc("path", "docs/a")), ok, stat{ok, 3, minUnit, uint32(2 - i)})
	}
	check(t, "docs/a 4th", s.call(t, "share", 1, desc("path", "docs/a")), over, stat{over, 3, minUnit, 0})
	for _, v := range []string{"docs/b", "docs/c"} {
		check(t, v+": its own counter", s.call(t, "share", 1, desc("path", v)), ok, stat{ok, 3, minUnit, 2})
	}
	// One series per configured descriptor, not per value.
	for path, want := range map[string]float64{"path_files/*": 6, "path_docs/*": 6, "path_files/a": 0} {
		if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "share", "descriptor": path}); got != want {
			t.Errorf("hits of %s = %g, want %g", path, got, want)
		}
	}

	// An explicit value comes first and counts apart.
	check(t, "test1 ×5", s.call(t, "share", 5, desc("file", "test1")), ok, stat{ok, 5, minUnit, 0})
	check(t, "testA", s.call(t, "share", 1, desc("file", "testA")), ok, stat{ok, 2, minUnit, 1})
	check(t, "testB", s.call(t, "share", 1, desc("file", "testB")), ok, stat{ok, 2, minUnit, 0})
	check(t, "testC", s.call(t, "share", 1, desc("file", "testC")), over, stat{over, 2, minUnit, 0})

	// A shared level above the limit: tenants matching t*prod share, per
	// user; the detailed metric keeps the wildcard.
	check(t, "t1prod u1", s.call(t, "share", 1, desc("tenant", "t1prod", "user", "u1")), ok, stat{ok, 2, minUnit, 1})
	check(t, "t2prod u1", s.call(t, "share", 1, desc("tenant", "t2prod", "user", "u1")), ok, stat{ok, 2, minUnit, 0})
	check(t, "t3prod u1", s.call(t, "share", 1, desc("tenant", "t3prod", "user", "u1")), over, stat{over, 2, minUnit, 0})
	check(t, "t1prod u2", s.call(t, "share", 1, desc("tenant", "t1prod", "user", "u2")), ok, stat{ok, 2, minUnit, 1})
	check(t, "t1dev u1: no match", s.call(t, "share", 1, desc("tenant", "t1dev", "user", "u1")), ok, stat{code: ok})
	for path, want := range map[string]float64{"tenant_t*prod.user_u1": 3, "tenant_t*prod.user_u2": 1, "tenant_t1prod.user_u1": 0} {
		if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "share", "descriptor": path}); got != want {
			t.Errorf("hits of %s = %g, want %g", path, got, want)
		}
	}

	// The counters are the shared ones, not a value's.
	r := s.srv.rules.Load().domains["share"].match(desc("path", "files/x").GetEntries()).limit
	if a, b := counterKey("share", desc("path", "files/x"), r), counterKey("share", desc("path", "files/y"), r); a != b {
		t.Errorf("files/x and files/y count in %q and %q", a, b)
	}
	if a, b := counterKey("share", desc("path", "files/*"), nil), counterKey("share", desc("path", "files/x"), r); a == b {
		t.Errorf("the shared counter %q is the one of the value files/*", b)
	}
}

// quota_mode: a descriptor in quota mode over its limit says so in its
// status, but the answer is OVER_LIMIT only when every quota descriptor
// of the request is over, or another descriptor is.
func TestQuotaMode(t *testing.T) {
	s := fixtureServer(t, "loads-quota-mode", Config{})
	free, trial, client := desc("plan", "free"), desc("plan", "trial"), desc("client", "c1")
	check(t, "free ×2", s.call(t, "quota", 2, free), ok, stat{ok, 2, minUnit, 0})
	check(t, "free over, alone", s.call(t, "quota", 1, free), over, stat{over, 2, minUnit, 0})
	check(t, "free over, trial within", s.call(t, "quota", 1, free, trial, client), ok,
		stat{over, 2, minUnit, 0}, stat{ok, 5, minUnit, 4}, stat{ok, 10, minUnit, 9})
	check(t, "free over, client within", s.call(t, "quota", 1, free, client), over,
		stat{over, 2, minUnit, 0}, stat{ok, 10, minUnit, 8})
	check(t, "trial ×4", s.call(t, "quota", 4, trial), ok, stat{ok, 5, minUnit, 0})
	check(t, "both quotas over", s.call(t, "quota", 1, free, trial), over, stat{over, 2, minUnit, 0}, stat{over, 5, minUnit, 0})
	s.call(t, "quota", 8, client)
	check(t, "client over, no quota", s.call(t, "quota", 1, desc("client", "c1")), over, stat{over, 10, minUnit, 0})
}

// value_to_metric: the request's value in the metric path, within the
// series cap of detailed_metric.
func TestValueToMetric(t *testing.T) {
	s := fixtureServer(t, "loads-value-to-metric", Config{})
	s.call(t, "v2m", 1, desc("route", "r1", "method", "GET"))
	s.call(t, "v2m", 1, desc("route", "r2", "method", "GET"))
	s.call(t, "v2m", 1, desc("route", "r2", "method", "POST"))
	s.call(t, "v2m", 1, desc("user", "u42"))
	s.call(t, "v2m", 1, desc("api", "/v1/x"), desc("api", "/v1/y"))
	for path, want := range map[string]float64{
		"route_r1.method": 1, "route_r2.method": 2, "route.method": 0, "route_r2.method_POST": 0,
		"user_u42": 1, "user_u*": 0,
		"api_/v1/*": 2, "api_/v1/x": 0,
	} {
		if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "v2m", "descriptor": path}); got != want {
			t.Errorf("hits of %s = %g, want %g", path, got, want)
		}
	}
	// Past MaxDetailedSeries values, hits count in the configured path.
	for i := range MaxDetailedSeries + 10 {
		s.call(t, "v2m", 1, desc("route", "many"+strconv.Itoa(i), "method", "GET"))
	}
	if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "v2m", "descriptor": "route.method"}); got != 12 {
		t.Errorf("overflow hits of route.method = %g, want 12", got)
	}
}

// Wildcards anywhere in a value, a "*" matching any run of bytes; the
// first wildcard declared that matches wins, after an exact value and
// before the key alone.
func TestWildcardsInValues(t *testing.T) {
	s := fixtureServer(t, "loads-wildcards", Config{})
	for _, c := range []struct {
		key, value string
		limit      uint32 // 0: no match
	}{
		{"trailing", "foo1", 20}, {"trailing", "foo", 20}, {"trailing", "xfoo", 0},
		{"middle", "barb", 21}, {"middle", "barXYb", 21}, {"middle", "bar", 0}, {"middle", "barXYbc", 0},
		{"many", "foo1bar2baz", 22}, {"many", "foobarbaz", 22}, {"many", "foo_baz_bar_baz", 22},
		{"many", "foobaz", 0}, {"many", "foobazbar", 0}, {"many", "foobarbaz!", 0},
		{"leading", "a.example.com", 23}, {"leading", ".example.com", 23}, {"leading", "example.com", 0},
		{"order", "abc", 3}, {"order", "abd", 1}, {"order", "a", 1}, {"order", "b", 4},
	} {
		want := stat{code: ok}
		if c.limit > 0 {
			want = stat{ok, c.limit, minUnit, c.limit - 1}
		}
		check(t, c.key+"="+c.value, s.call(t, "wild", 1, desc(c.key, c.value)), ok, want)
	}
	check(t, "nested", s.call(t, "wild", 1, desc("nested", "val1", "wild", "goo2")), ok, stat{ok, 24, minUnit, 23})
	check(t, "foo1 again: its own counter", s.call(t, "wild", 1, desc("trailing", "foo1")), ok, stat{ok, 20, minUnit, 18})
}

// week, month and year: windows of 7, 30 and 365 days, which the
// namespace must have.
func TestLongUnits(t *testing.T) {
	s := fixtureServer(t, "loads-long-units", Config{})
	week, month, year := rlsv3.RateLimitResponse_RateLimit_WEEK, rlsv3.RateLimitResponse_RateLimit_MONTH, rlsv3.RateLimitResponse_RateLimit_YEAR
	check(t, "weekly ×7", s.call(t, "units", 7, desc("weekly", "a")), ok, stat{ok, 7, week, 0})
	check(t, "monthly", s.call(t, "units", 1, desc("monthly", "a")), ok, stat{ok, 30, month, 29})
	check(t, "yearly", s.call(t, "units", 1, desc("yearly", "a")), ok, stat{ok, 365, year, 364})
	s.clock.Add(time.Hour)
	check(t, "weekly 8th, an hour on", s.call(t, "units", 1, desc("weekly", "a")), over, stat{over, 7, week, 0})

	dir := t.TempDir()
	for name, data := range fixture(t, "loads-long-units") {
		writeFile(t, dir, name, data)
	}
	_, err := loadDir(Config{Dir: dir, Namespace: "envoy"}, daySizes)
	if err == nil || !strings.Contains(err.Error(), "descriptors[0].rate_limit.unit: unit week needs the window size 604800s") {
		t.Errorf("a week without its window size: %v", err)
	}
}

// What upstream's loader takes, limiterd takes, with its meaning.
func TestUpstreamLeniency(t *testing.T) {
	s := fixtureServer(t, "loads-upstream-leniency", Config{})
	check(t, "no requests_per_unit: 0", s.call(t, "lenient", 1, desc("blocked", "x")), over, stat{over, 0, second, 0})
	check(t, "unlimited, odd unit", s.call(t, "lenient", 1, desc("open", "x")), ok, stat{code: ok, remaining: math.MaxUint32})
	s.call(t, "lenient", 1, desc("shadowed", "x"))
	check(t, "shadow_mode: yes", s.call(t, "lenient", 1, desc("shadowed", "x")), ok, stat{ok, 1, minUnit, 0})
	s.call(t, "lenient", 1, desc("misplaced", "x"))
	check(t, "shadow_mode in rate_limit: ignored", s.call(t, "lenient", 1, desc("misplaced", "x")), over, stat{over, 1, minUnit, 0})
	s.call(t, "lenient", 1, desc("parent", "p", "child", "c"))
	for path, want := range map[string]float64{"parent.child": 1, "parent_p.child_c": 0} {
		if got := s.counter(t, "limiterd_envoy_rule_hits_total", map[string]string{"domain": "lenient", "descriptor": path}); got != want {
			t.Errorf("hits of %s = %g, want %g (detailed_metric is the limit's own)", path, got, want)
		}
	}
	ws := s.srv.rules.Load().warnings
	if len(ws) != 1 || !strings.Contains(ws[0], "lenient.yaml:24: descriptors[3].rate_limit.shadow_mode: has no effect here") {
		t.Errorf("warnings = %q, want one about the shadow_mode in a rate_limit", ws)
	}
}

// metadata loads, whatever it holds, and changes nothing.
func TestMetadata(t *testing.T) {
	s := fixtureServer(t, "loads-metadata", Config{})
	check(t, "subkey1", s.call(t, "meta", 1, desc("key1", "value1", "subkey1", "x")), ok, stat{ok, 5, second, 4})
	check(t, "key2", s.call(t, "meta", 1, desc("key2", "x")), ok, stat{ok, 20, minUnit, 19})
}

// A domain split over two files merges with merge_domain_config and is
// refused without it; a descriptor defined in both is refused either way.
func TestMergeDomain(t *testing.T) {
	s := fixtureServer(t, "merge-domain", Config{MergeDomainConfig: true})
	check(t, "key1 of a.yaml", s.call(t, "merged", 1, desc("key1", "value1")), ok, stat{ok, 10, minUnit, 9})
	check(t, "key2 of b.yaml", s.call(t, "merged", 1, desc("key2", "value2")), ok, stat{ok, 20, minUnit, 19})

	for _, c := range []struct {
		dir   string
		merge bool
		field string
		line  int
		want  string
	}{
		{"merge-domain", false, "domain", 1, `domain "merged" is also defined in ` + filepath.Join(upstreamDir, "merge-domain", "a.yaml") + " (envoy.merge_domain_config"},
		{"merge-duplicate-descriptor", false, "domain", 1, `domain "merged" is also defined in`},
		{"merge-duplicate-descriptor", true, "descriptors[1]", 5, `duplicate descriptor "key1_value1" (first at ` + filepath.Join(upstreamDir, "merge-duplicate-descriptor", "a.yaml") + ": descriptors[0])"},
	} {
		_, err := loadDir(Config{Dir: filepath.Join(upstreamDir, c.dir), Namespace: "envoy", MergeDomainConfig: c.merge}, allSizes)
		re, ok := errors.AsType[*RulesError](err)
		if !ok || !strings.HasSuffix(re.File, "b.yaml") || re.Field != c.field || re.Line != c.line || !strings.Contains(re.Reason, c.want) {
			t.Errorf("%s, merge %v: %v; want b.yaml:%d, %s: %s", c.dir, c.merge, err, c.line, c.field, c.want)
		}
	}
}

// Anchors, aliases and merge keys load as YAML has them; a mapping that
// contains itself is refused, not walked forever.
func TestAnchors(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"a.yaml": `
domain: anchors
descriptors:
  - key: a
    rate_limit: &perMinute {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit:
      <<: *perMinute
      requests_per_unit: 3
`})
	check(t, "a", s.call(t, "anchors", 1, desc("a", "x")), ok, stat{ok, 2, minUnit, 1})
	check(t, "b", s.call(t, "anchors", 1, desc("b", "x")), ok, stat{ok, 3, minUnit, 2})

	_, _, err := parseDomain([]byte("domain: d\ndescriptors:\n  - &x\n    key: k\n    descriptors: [*x]\n"), allSizes, "envoy")
	if err == nil || !strings.Contains(err.Error(), "contains itself") {
		t.Errorf("a descriptor that contains itself: %v", err)
	}
}

package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/internal/confval"
	"github.com/limiterd/limiterd/node"
)

// yamlPaths lists the YAML fields of t: "sync.batch_size",
// "namespaces[].name", "stores.*.type".
func yamlPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		p := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[yaml.Node]():
			out = append(out, yamlPaths(ft, p+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, yamlPaths(ft.Elem(), p+"[].")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, yamlPaths(ft.Elem(), p+".*.")...)
		default:
			out = append(out, p)
		}
	}
	return out
}

var configPaths = yamlPaths(reflect.TypeFor[Config](), "")

// TestConfigFullExample parses a file setting every field and checks each
// one; a field added to Config without a check here fails the test.
func TestConfigFullExample(t *testing.T) {
	data, err := os.ReadFile("testdata/config/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := decodeConfig("full.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	ns := func(i int) NamespaceConfig {
		if i >= len(cfg.Namespaces) {
			return NamespaceConfig{}
		}
		return cfg.Namespaces[i]
	}
	sizes := func(i int) []time.Duration {
		var out []time.Duration
		for _, d := range ns(i).WindowSizes {
			out = append(out, time.Duration(d))
		}
		return out
	}
	// limit is api's policy's i-th limit, its unset kinds zero.
	limit := func(policy string, i int) LimitConfig {
		var l LimitConfig
		if ls := ns(1).Policies[policy].Limits; i < len(ls) {
			l = ls[i]
		}
		if l.Token == nil {
			l.Token = &TokenBucketConfig{}
		}
		if l.Leaky == nil {
			l.Leaky = &LeakyBucketConfig{}
		}
		if l.Fixed == nil {
			l.Fixed = &FixedBucketConfig{}
		}
		return l
	}
	login := func(i int) LimitConfig { return limit("login", i) }
	export := func(i int) LimitConfig { return limit("export", i) }
	rate := func(i int) any {
		if r := ns(i).SyncRate; r != nil {
			return *r
		}
		return nil
	}
	storeOpt := func(name, key string) any {
		var m map[string]any
		n := cfg.Stores[name].Options
		if err := n.Decode(&m); err != nil {
			return err
		}
		return m[key]
	}
	checks := map[string][]struct{ got, want any }{
		"node_name":                      {{cfg.NodeName, "edge-1"}},
		"grpc_addr":                      {{cfg.GRPCAddr, "0.0.0.0:9090"}},
		"http_addr":                      {{cfg.HTTPAddr, "0.0.0.0:9091"}},
		"log_level":                      {{cfg.LogLevel, "debug"}},
		"log_format":                     {{cfg.LogFormat, "json"}},
		"tracing.endpoint":               {{cfg.Tracing.Endpoint, "otel-collector:4317"}},
		"tracing.insecure":               {{cfg.Tracing.Insecure, true}},
		"tracing.headers":                {{cfg.Tracing.Headers, map[string]string{"x-api-key": "k"}}},
		"tracing.sample_ratio":           {{cfg.Tracing.SampleRatio, 0.25}},
		"drain_delay":                    {{time.Duration(cfg.DrainDelay), 3 * time.Second}},
		"stop_timeout":                   {{time.Duration(cfg.StopTimeout), 12 * time.Second}},
		"grpc_max_connection_age":        {{time.Duration(cfg.GRPCMaxConnectionAge), 10 * time.Minute}},
		"resp_addr":                      {{cfg.RESPAddr, "0.0.0.0:6380"}},
		"admin_addr":                     {{cfg.AdminAddr, "6060"}, {must(AdminAddr(cfg.AdminAddr)), "127.0.0.1:6060"}},
		"tls.cert_file":                  {{cfg.TLS.CertFile, "/etc/limiterd/tls/server.crt"}},
		"tls.key_file":                   {{cfg.TLS.KeyFile, "/etc/limiterd/tls/server.key"}},
		"tls.client_ca_file":             {{cfg.TLS.ClientCAFile, "/etc/limiterd/tls/clients-ca.crt"}},
		"tls.client_auth":                {{cfg.TLS.ClientAuth, "request"}, {must(cfg.TLS.clientAuth()), tls.VerifyClientCertIfGiven}},
		"tls.min_version":                {{cfg.TLS.MinVersion, "1.3"}, {must(cfg.TLS.minVersion()), uint16(tls.VersionTLS13)}},
		"resp.max_command_size":          {{cfg.RESP.MaxCommandSize, 65536}},
		"resp.max_clients":               {{cfg.RESP.MaxClients, 500}},
		"resp.idle_timeout":              {{time.Duration(cfg.RESP.IdleTimeout), 5 * time.Minute}},
		"resp.max_queued_commands":       {{cfg.RESP.MaxQueuedCommands, 100}},
		"resp.max_queued_bytes":          {{cfg.RESP.MaxQueuedBytes, 65536}},
		"shutdown_timeout":               {{time.Duration(cfg.ShutdownTimeout), 7 * time.Second}},
		"connections.max":                {{cfg.Connections.Max, 900}},
		"connections.max_per_address":    {{cfg.Connections.MaxPerAddress, 300}},
		"connections.idle_timeout":       {{time.Duration(cfg.Connections.IdleTimeout), 90 * time.Second}, {time.Duration(cfg.Connections.WithDefaults().IdleTimeout), 90 * time.Second}},
		"connections.read_timeout":       {{time.Duration(cfg.Connections.ReadTimeout), 20 * time.Second}},
		"connections.write_timeout":      {{time.Duration(cfg.Connections.WriteTimeout), 45 * time.Second}},
		"connections.max_inflight_bytes": {{cfg.Connections.MaxInflightBytes, int64(64 << 20)}},
		"connections.grpc_max_streams":   {{cfg.Connections.GRPCMaxStreams, 50}},
		"connections.auth_timeout":       {{time.Duration(cfg.Connections.AuthTimeout), 3 * time.Second}},
		"sync.tick_timeout":              {{time.Duration(cfg.Sync.TickTimeout), 2 * time.Second}},
		"sync.call_timeout":              {{time.Duration(cfg.Sync.CallTimeout), 100 * time.Millisecond}}, // bare 0.1
		"sync.retry_period":              {{time.Duration(cfg.Sync.RetryPeriod), time.Second}},            // bare 1
		"sync.batch_size":                {{cfg.Sync.BatchSize, 1000}},
		"stores.*.type": {
			{len(cfg.Stores), 2}, {cfg.Stores["main"].Type, "redis"}, {cfg.Stores["pg"].Type, "postgres"},
			// The store's own options are kept for its package.
			{storeOpt("main", "addrs"), []any{"127.0.0.1:6379"}},
			{storeOpt("pg", "dsn"), "postgres://limiterd@127.0.0.1:5432/limiter?sslmode=disable"},
			{storeOpt("pg", "type"), "postgres"},
		},
		"namespaces[].name": {{len(cfg.Namespaces), 4}, {ns(0).Name, "default"}, {ns(1).Name, "api"}, {ns(2).Name, "billing"}, {ns(3).Name, "flows"}},
		"namespaces[].window_sizes": {
			{sizes(0), []time.Duration{time.Second, time.Minute}},
			{sizes(1), []time.Duration{100 * time.Millisecond, time.Second, time.Hour}}, // [0.1, 1, "1h"]
			{sizes(2), []time.Duration{time.Minute}},
			{sizes(3), []time.Duration{time.Second}},
		},
		"namespaces[].sync_rate": {{rate(0), -1.0}, {rate(1), 0.1}, {rate(2), 0.0}, {rate(3), -1.0},
			{cfg.NamespaceMode("default"), clustersync.Mode(clustersync.Local{})}, {cfg.NamespaceMode("api"), clustersync.Mode(clustersync.Periodic{Period: 100 * time.Millisecond})},
			{cfg.NamespaceMode("billing"), clustersync.Mode(clustersync.Synchronous{})}},
		"namespaces[].store":                                   {{ns(0).Store, ""}, {ns(1).Store, "main"}, {ns(2).Store, "pg"}, {ns(3).Store, ""}, {cfg.NamespaceSyncerConfig("api").StoreName, "main"}},
		"namespaces[].max_keys":                                {{ns(0).MaxKeys, 500}, {ns(1).MaxKeys, 0}, {ns(2).MaxKeys, 2_000_000}, {ns(3).MaxKeys, 0}},
		"namespaces[].max_bytes":                               {{ns(0).MaxBytes, int64(16 << 20)}, {ns(1).MaxBytes, int64(0)}},
		"namespaces[].on_full":                                 {{ns(0).OnFull, "evict"}, {ns(1).OnFull, ""}, {ns(2).OnFull, ""}, {ns(3).OnFull, ""}},
		"namespaces[].escalate":                                {{ns(0).Escalate, ""}, {ns(1).Escalate, "never"}, {cfg.NamespaceSyncerConfig("api").NoEscalate, true}, {cfg.NamespaceSyncerConfig("billing").NoEscalate, false}},
		"namespaces[].max_lease_ttl":                           {{time.Duration(ns(0).MaxLeaseTTL), time.Duration(0)}, {time.Duration(ns(1).MaxLeaseTTL), 10 * time.Minute}, {time.Duration(ns(2).MaxLeaseTTL), 90 * time.Second}},
		"namespaces[].on_store_down":                           {{ns(0).OnStoreDown, ""}, {ns(1).OnStoreDown, ""}, {ns(2).OnStoreDown, "local"}, {cfg.NamespaceSyncerConfig("billing").OnStoreDown, clustersync.StoreDownLocal}},
		"namespaces[].estimator.hashes":                        {{ns(0).Estimator == nil, true}, {ns(3).Estimator, &EstimatorConfig{Hashes: 4, Slots: 65536}}},
		"namespaces[].estimator.slots":                         {{ns(1).Estimator == nil && ns(2).Estimator == nil, true}},
		"namespaces[].shadow":                                  {{ns(0).Shadow, false}, {ns(1).Shadow, true}},
		"namespaces[].policies.*.shadow":                       {{len(ns(1).Policies), 2}, {ns(1).Policies["login"].Shadow, true}, {ns(1).Policies["export"].Shadow, false}, {ns(0).Policies == nil, true}},
		"namespaces[].policies.*.limits[].window_size":         {{time.Duration(login(0).WindowSize), time.Second}},
		"namespaces[].policies.*.limits[].limit":               {{login(0).Limit, 5.0}},
		"namespaces[].policies.*.limits[].token.max":           {{login(1).Token.Max, 10.0}},
		"namespaces[].policies.*.limits[].token.refill_time":   {{time.Duration(login(1).Token.RefillTime), time.Minute}},
		"namespaces[].policies.*.limits[].token.refill_amount": {{login(1).Token.RefillAmount, 2.0}},
		"namespaces[].policies.*.limits[].token.strict":        {{login(1).Token.Strict, true}},
		"namespaces[].policies.*.limits[].leaky.size":          {{export(0).Leaky.Size, 3.0}},
		"namespaces[].policies.*.limits[].leaky.interval":      {{time.Duration(export(0).Leaky.Interval), 30 * time.Second}},
		"namespaces[].policies.*.limits[].leaky.wait_timeout":  {{time.Duration(export(0).Leaky.WaitTimeout), 5 * time.Second}},
		"namespaces[].policies.*.limits[].fixed.period":        {{time.Duration(export(1).Fixed.Period), time.Hour}},
		"namespaces[].policies.*.limits[].fixed.limit":         {{export(1).Fixed.Limit, 100.0}},
		"envoy.config_dir":                                     {{cfg.Envoy.ConfigDir, "/etc/limiterd/envoy"}},
		"envoy.namespace":                                      {{cfg.Envoy.Namespace, "api"}},
		"envoy.poll_interval":                                  {{cfg.Envoy.Poll(), 5 * time.Second}},
		"envoy.stop_increment_when_over_limit":                 {{cfg.Envoy.StopIncrementWhenOverLimit, true}},
		"envoy.response_headers.enabled":                       {{cfg.Envoy.ResponseHeaders.Enabled, true}},
		"envoy.response_headers.limit":                         {{cfg.Envoy.ResponseHeaders.Limit, "RateLimit-Limit"}},
		"envoy.response_headers.remaining":                     {{cfg.Envoy.ResponseHeaders.Remaining, "RateLimit-Remaining"}},
		"envoy.response_headers.reset":                         {{cfg.Envoy.ResponseHeaders.Reset, "RateLimit-Reset"}},
		"envoy.near_limit_ratio":                               {{cfg.Envoy.NearLimitRatio, 0.9}},
		"envoy.merge_domain_config":                            {{cfg.Envoy.MergeDomainConfig, true}, {cfg.Envoy.FrontConfig().MergeDomainConfig, true}},
	}
	maps.Copy(checks, authChecks(cfg))
	for _, p := range configPaths {
		cs, ok := checks[p]
		if !ok {
			t.Errorf("field %s is not checked: add it to full.yaml and to this test", p)
		}
		for _, c := range cs {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s: got %#v, want %#v", p, c.got, c.want)
			}
		}
	}
	for p := range checks {
		if !slices.Contains(configPaths, p) {
			t.Errorf("check for %s, which is not a config field", p)
		}
	}

	// What the daemon takes from it.
	ncs := cfg.NodeConfigs()
	want := []node.Config{
		{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, MaxKeys: 500, MaxBytes: 16 << 20, OnFull: node.OnFullEvict},
		{Name: "api", WindowSizes: []time.Duration{100 * time.Millisecond, time.Second, time.Hour}, Shared: true, LeaseIdle: 400 * time.Millisecond, MaxLeaseTTL: 10 * time.Minute,
			Shadow: true, Policies: map[string]ratelimit.Policy{
				"login": {Shadow: true, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 5},
					{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 2}, Strict: true}}},
				"export": {Limits: []ratelimit.Limit{{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 3, Interval: 30 * time.Second}, WaitTimeout: 5 * time.Second},
					{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Hour, Limit: 100}}}},
			}},
		{Name: "billing", WindowSizes: []time.Duration{time.Minute}, Shared: true, MaxKeys: 2_000_000, MaxLeaseTTL: 90 * time.Second},
		{Name: "flows", WindowSizes: []time.Duration{time.Second}, Estimator: &node.EstimatorConfig{Hashes: 4, Slots: 65536}},
	}
	if !reflect.DeepEqual(ncs, want) {
		t.Errorf("NodeConfigs = %+v\nwant %+v", ncs, want)
	}
	sc := cfg.SyncerConfig()
	if sc.TickTimeout != 2*time.Second || sc.CallTimeout != 100*time.Millisecond || sc.RetryPeriod != time.Second ||
		sc.ShutdownTimeout != 7*time.Second || sc.BatchSize != 1000 {
		t.Errorf("SyncerConfig = %+v", sc)
	}

	t.Run("validates", func(t *testing.T) {
		_, err := ParseConfig("full.yaml", data)
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestDecodeSyncRate: the one decoding of sync_rate into a mode.
func TestDecodeSyncRate(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		rate *float64
		want clustersync.Mode
		err  string // in the error, when one is wanted
	}{
		{"negative", f(-1), clustersync.Local{}, ""},
		{"tiny negative", f(-1e-300), clustersync.Local{}, ""},
		{"zero", f(0), clustersync.Synchronous{}, ""},
		{"negative zero", f(math.Copysign(0, -1)), clustersync.Synchronous{}, ""},
		{"tenth", f(0.1), clustersync.Periodic{Period: 100 * time.Millisecond}, ""},
		{"smallest", f(0.001), clustersync.Periodic{Period: time.Millisecond}, ""},
		{"a day", f(86400), clustersync.Periodic{Period: 24 * time.Hour}, ""},
		{"tiny", f(1e-9), nil, "at least 0.001 s"},
		{"below 1ms", f(0.0005), nil, "at least 0.001 s"},
		{"above a day", f(86401), nil, "at most 86400 s"},
		{"huge", f(1e300), nil, "at most 86400 s"},
		{"NaN", f(math.NaN()), nil, "finite"},
		{"+Inf", f(math.Inf(1)), nil, "finite"},
		{"-Inf", f(math.Inf(-1)), nil, "finite"},
		{"missing", nil, nil, "is required"},
	} {
		got, err := DecodeSyncRate(tc.rate)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || got != nil):
			t.Errorf("%s: %v, %v; want an error with %q", tc.name, got, err, tc.err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	for _, data := range []string{"", "# nothing\n", "namespaces: []\n", "namespaces:\n"} {
		cfg, err := ParseConfig("c.yaml", []byte(data))
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if cfg.GRPCAddr != "127.0.0.1:7070" || cfg.HTTPAddr != "127.0.0.1:7071" || cfg.LogLevel != "info" {
			t.Errorf("%q: %+v, want the defaults", data, cfg)
		}
		if got := cfg.NodeConfigs(); !reflect.DeepEqual(got, []node.Config{node.DefaultConfig()}) {
			t.Errorf("%q: namespaces %+v, want the default namespace", data, got)
		}
	}
	cfg, err := ParseConfig("c.yaml", []byte("http_addr: \"off\"\n"))
	if err != nil || cfg.HTTPAddr != "off" {
		t.Errorf("http_addr off: %+v, %v", cfg, err)
	}
}

// normalize turns "namespaces[2].window_sizes[0]" into the path
// "namespaces[].window_sizes" that yamlPaths lists.
var (
	itemIndex = regexp.MustCompile(`\[\d+\]`)
	storeName = regexp.MustCompile(`^stores\.[^.]+`)
)

// policyName is a policy's name in a field's path.
var policyName = regexp.MustCompile(`\.policies\.[^.\[]+`)

func normalize(field string) string {
	p := policyName.ReplaceAllString(field, ".policies.*")
	p = itemIndex.ReplaceAllString(p, "[]")
	p = strings.TrimSuffix(p, "[]")
	return storeName.ReplaceAllString(p, "stores.*")
}

// TestConfigValidation: one bad value per field, each rejected with an
// error naming the file, the field and the reason; every field has a case.
func TestConfigValidation(t *testing.T) {
	const ns = "namespaces:\n  - name: default\n    window_sizes: [1s, 60s]\n    sync_rate: -1\n"
	nsWith := func(lines string) string { return "namespaces:\n  - name: default\n" + lines }
	seventeen := "[1ms, 2ms, 3ms, 4ms, 5ms, 6ms, 7ms, 8ms, 9ms, 10ms, 11ms, 12ms, 13ms, 14ms, 15ms, 16ms, 17ms]"
	cases := []struct {
		name, yaml, field string
		reason            []string
	}{
		{"node name with a newline", "node_name: \"a\\nb\"\n" + ns, "node_name", []string{"control characters"}},
		{"node name too long", "node_name: " + strings.Repeat("n", 254) + "\n" + ns, "node_name", []string{"at most 253 bytes"}},
		{"node name invalid UTF-8", "node_name: !!binary /w==\n" + ns, "node_name", nil},
		{"empty grpc_addr", "grpc_addr: \"\"\n" + ns, "grpc_addr", []string{"must not be empty"}},
		{"grpc_addr without port", "grpc_addr: localhost\n" + ns, "grpc_addr", []string{"host:port", `"localhost"`}},
		{"grpc_addr not a string", "grpc_addr: [a]\n" + ns, "grpc_addr", []string{"cannot unmarshal"}},
		{"http_addr without port", "http_addr: nowhere\n" + ns, "http_addr", []string{"host:port or \"off\""}},
		{"log level", "log_level: loud\n" + ns, "log_level", []string{"debug, info, warn or error", `"loud"`}},
		{"log level case", "log_level: INFO\n" + ns, "log_level", []string{`"INFO"`}},
		{"negative shutdown_timeout", "shutdown_timeout: -1s\n" + ns, "shutdown_timeout", []string{"must not be negative"}},
		{"log format", "log_format: xml\n" + ns, "log_format", []string{"must be text or json", `"xml"`}},
		{"tracing endpoint", "tracing: {endpoint: collector}\n" + ns, "tracing.endpoint", []string{"host:port"}},
		{"tracing insecure", "tracing: {insecure: maybe}\n" + ns, "tracing.insecure", []string{"cannot unmarshal"}},
		{"tracing header", "tracing: {headers: {\"bad header\": v}}\n" + ns, "tracing.headers", []string{"not a header name"}},
		{"tracing sample_ratio", "tracing: {sample_ratio: 2}\n" + ns, "tracing.sample_ratio", []string{"between 0 and 1"}},
		{"negative drain_delay", "drain_delay: -1s\n" + ns, "drain_delay", []string{"must not be negative"}},
		{"negative stop_timeout", "stop_timeout: -2s\n" + ns, "stop_timeout", []string{"must not be negative"}},
		{"negative grpc_max_connection_age", "grpc_max_connection_age: -1m\n" + ns, "grpc_max_connection_age", []string{"must not be negative"}},
		{"unparsable shutdown_timeout", "shutdown_timeout: soon\n" + ns, "shutdown_timeout", []string{`invalid duration "soon"`}},
		{"NaN shutdown_timeout", "shutdown_timeout: .nan\n" + ns, "shutdown_timeout", []string{"invalid duration"}},
		{"huge shutdown_timeout", "shutdown_timeout: 1e12\n" + ns, "shutdown_timeout", []string{"invalid duration"}},
		{"negative tick_timeout", "sync:\n  tick_timeout: -1\n" + ns, "sync.tick_timeout", []string{"must not be negative"}},
		{"negative call_timeout", "sync:\n  call_timeout: -0.1\n" + ns, "sync.call_timeout", []string{"must not be negative, got -100ms"}},
		{"negative retry_period", "sync:\n  retry_period: -1ms\n" + ns, "sync.retry_period", []string{"must not be negative"}},
		{"unparsable retry_period", "sync: {retry_period: often}\n" + ns, "sync.retry_period", []string{`"often"`}},
		{"negative batch_size", "sync:\n  batch_size: -1\n" + ns, "sync.batch_size", []string{"must not be negative"}},
		{"fractional batch_size", "sync:\n  batch_size: 1.5\n" + ns, "sync.batch_size", []string{"whole number", `"1.5"`}},
		{"batch_size overflow", "sync:\n  batch_size: 99999999999999999999\n" + ns, "sync.batch_size", []string{"cannot unmarshal"}},
		{"unknown sync field", "sync:\n  tick: 1s\n" + ns, "sync.tick", []string{`unknown field "tick"`}},
		{"unknown store type", "stores:\n  cache:\n    type: memcached\n" + ns, "stores.cache.type", []string{"must be one of redis, postgres, cassandra", `"memcached"`}},
		{"store without type", "stores:\n  s: {addrs: [a]}\n" + ns, "stores.s.type", []string{`got ""`}},
		{"store type in another case", "stores:\n  s: {type: Redis}\n" + ns, "stores.s.type", []string{`"Redis"`}},
		{"store not a mapping", "stores:\n  s: redis\n" + ns, "stores.s", []string{"must be a mapping"}},
		{"namespace name", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n") + "  - name: \"a b\"\n    window_sizes: [1s]\n    sync_rate: -1\n",
			"namespaces[1].name", []string{`"a b"`, "1-64 characters"}},
		{"namespace name missing", "namespaces:\n  - {window_sizes: [1s], sync_rate: -1}\n", "namespaces[0].name", []string{`""`}},
		{"duplicate namespace", ns + "  - name: default\n    window_sizes: [1s]\n    sync_rate: -1\n", "namespaces[1].name", []string{"defined twice"}},
		{"no window sizes", nsWith("    sync_rate: -1\n"), "namespaces[0].window_sizes", []string{"at least one"}},
		{"zero window size", nsWith("    window_sizes: [1s, 0]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[1]", []string{"between 1ms and"}},
		{"sub-millisecond window size", nsWith("    window_sizes: [1.5ms]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[0]", []string{"whole number of milliseconds"}},
		{"bare 0.0005 s", nsWith("    window_sizes: [0.0005]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[0]", []string{"between 1ms and"}},
		{"window size above 366 days", nsWith("    window_sizes: [8785h]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[0]", []string{"between 1ms and"}},
		{"duplicate window size", nsWith("    window_sizes: [1s, 1m, 1000ms]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[2]", []string{"duplicate window size 1s"}},
		{"17 window sizes", nsWith("    window_sizes: " + seventeen + "\n    sync_rate: -1\n"), "namespaces[0].window_sizes", []string{"at most 16"}},
		{"unparsable window size", nsWith("    window_sizes:\n      - 1s\n      - soon\n    sync_rate: -1\n"), "namespaces[0].window_sizes[1]", []string{`invalid duration "soon"`}},
		{"sync_rate missing", nsWith("    window_sizes: [1s]\n"), "namespaces[0].sync_rate", []string{"is required"}},
		{"sync_rate null", nsWith("    window_sizes: [1s]\n    sync_rate: ~\n"), "namespaces[0].sync_rate", []string{"is required"}},
		{"sync_rate below 1ms", nsWith("    window_sizes: [1s]\n    sync_rate: 0.0001\n    store: s\n"), "namespaces[0].sync_rate", []string{"at least 0.001"}},
		{"sync_rate above a day", nsWith("    window_sizes: [1s]\n    sync_rate: 86401\n    store: s\n"), "namespaces[0].sync_rate", []string{"at most 86400"}},
		{"sync_rate NaN", nsWith("    window_sizes: [1s]\n    sync_rate: .nan\n"), "namespaces[0].sync_rate", []string{"finite"}},
		{"sync_rate -Inf", nsWith("    window_sizes: [1s]\n    sync_rate: -.inf\n"), "namespaces[0].sync_rate", []string{"finite"}},
		{"sync_rate a duration", nsWith("    window_sizes: [1s]\n    sync_rate: 100ms\n"), "namespaces[0].sync_rate", []string{"cannot unmarshal", "`100ms`"}},
		{"syncing without a store", nsWith("    window_sizes: [1s]\n    sync_rate: 0\n"), "namespaces[0].store", []string{"needs a store"}},
		{"undeclared store", nsWith("    window_sizes: [1s]\n    sync_rate: 1\n    store: main\n"), "namespaces[0].store", []string{`store "main" is not declared`}},
		{"negative max_keys", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_keys: -1\n"), "namespaces[0].max_keys", []string{"must not be negative"}},
		{"fractional max_keys", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_keys: 2.5\n"), "namespaces[0].max_keys", []string{"whole number", `"2.5"`}},
		{"negative max_bytes", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_bytes: -1\n"), "namespaces[0].max_bytes", []string{"at least 1048576"}},
		{"small max_bytes", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_bytes: 1000\n"), "namespaces[0].max_bytes", []string{"at least 1048576", "got 1000"}},
		{"fractional max_bytes", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_bytes: 2.5e6\n"), "namespaces[0].max_bytes", []string{"whole number"}},
		{"max_keys not a number", "namespaces:\n  - {name: a, window_sizes: [1s], sync_rate: -1, max_keys: lots}\n", "namespaces[0].max_keys", []string{"`lots`"}},
		{"unknown on_full", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    on_full: drop\n"), "namespaces[0].on_full", []string{`must be "refuse" or "evict"`, `"drop"`}},
		{"unknown escalate", nsWith("    window_sizes: [1s]\n    sync_rate: 0.1\n    store: main\n    escalate: always\n"), "namespaces[0].escalate", []string{`must be "auto" or "never"`, `"always"`}},
		{"negative max_lease_ttl", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_lease_ttl: -1s\n"), "namespaces[0].max_lease_ttl", []string{"between 0 (default 3600s) and 604800s", "got -1s"}},
		{"max_lease_ttl above a week", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_lease_ttl: 169h\n"), "namespaces[0].max_lease_ttl", []string{"and 604800s", "got 608400s"}},
		{"max_lease_ttl bare seconds above a week", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_lease_ttl: 604801\n"), "namespaces[0].max_lease_ttl", []string{"got 604801s"}},
		{"unparsable max_lease_ttl", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    max_lease_ttl: forever\n"), "namespaces[0].max_lease_ttl", []string{`invalid duration "forever"`}},
		{"unknown on_store_down", nsWith("    window_sizes: [1s]\n    sync_rate: 0\n    store: s\n    on_store_down: fail\n"), "namespaces[0].on_store_down", []string{`must be "refuse" or "local"`, `"fail"`}},
		{"on_store_down in another case", nsWith("    window_sizes: [1s]\n    sync_rate: 0\n    store: s\n    on_store_down: Local\n"), "namespaces[0].on_store_down", []string{`"Local"`}},
		{"on_full evict in an estimator", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    on_full: evict\n    estimator: {hashes: 4, slots: 1024}\n"), "namespaces[0].on_full", []string{"holds no keys"}},
		{"estimator hashes zero", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator: {hashes: 0, slots: 65536}\n"), "namespaces[0].estimator.hashes", []string{"between 1 and 16", "got 0"}},
		{"estimator hashes 17", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator: {hashes: 17, slots: 65536}\n"), "namespaces[0].estimator.hashes", []string{"between 1 and 16"}},
		{"estimator slots too few", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator: {hashes: 4, slots: 8}\n"), "namespaces[0].estimator.slots", []string{"between 16 and 16777216", "got 8"}},
		{"estimator slots not a number", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator:\n      hashes: 4\n      slots: many\n"), "namespaces[0].estimator.slots", []string{"`many`"}},
		{"unknown estimator field", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator:\n      rows: 4\n"), "namespaces[0].estimator.rows", []string{`unknown field "rows"`}},
		{"estimator periodic without a store", nsWith("    window_sizes: [1s]\n    sync_rate: 1\n    estimator: {hashes: 4, slots: 65536}\n"), "namespaces[0].sync_rate", []string{"an estimator namespace is local only", "got 1"}},
		{"duplicate window size of a minute", nsWith("    window_sizes: [60s, 1m]\n    sync_rate: -1\n"), "namespaces[0].window_sizes[1]", []string{"duplicate window size 60s"}},
		{"estimator periodic", nsWith("    window_sizes: [1s]\n    sync_rate: 1\n    store: s\n    estimator: {hashes: 4, slots: 65536}\n"), "namespaces[0].sync_rate", []string{"local only", "got 1"}},
		{"estimator synchronous", nsWith("    window_sizes: [1s]\n    sync_rate: 0\n    store: s\n    estimator: {hashes: 4, slots: 65536}\n"), "namespaces[0].sync_rate", []string{"local only", "got 0"}},
		{"unknown namespace field", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    sync: 1\n"), "namespaces[0].sync", []string{`unknown field "sync"`}},
		{"unknown top-level field", "grpc_adr: x\n" + ns, "grpc_adr", []string{`unknown field "grpc_adr"`}},
		{"duplicate key", "log_level: info\nlog_level: warn\n" + ns, "log_level", []string{"already defined"}},
		{"second document", ns + "---\n" + ns, "", []string{"second one"}},
		{"not YAML", "namespaces: [\n", "", []string{"did not find expected node content"}},
		{"envoy config_dir not a string", "envoy:\n  config_dir: [a]\n" + ns, "envoy.config_dir", []string{"cannot unmarshal"}},
		{"envoy namespace not configured", "envoy: {config_dir: d, namespace: api}\n" + ns, "envoy.namespace", []string{`namespace "api" is not configured`}},
		{"envoy negative poll_interval", "envoy: {config_dir: d, poll_interval: -1s}\n" + ns, "envoy.poll_interval", []string{"must not be negative"}},
		{"envoy stop_increment not a bool", "envoy: {config_dir: d, stop_increment_when_over_limit: maybe}\n" + ns, "envoy.stop_increment_when_over_limit", []string{"cannot unmarshal"}},
		{"envoy headers enabled not a bool", "envoy:\n  config_dir: d\n  response_headers: {enabled: maybe}\n" + ns, "envoy.response_headers.enabled", []string{"cannot unmarshal"}},
		{"envoy limit header", "envoy:\n  config_dir: d\n  response_headers: {limit: \"a b\"}\n" + ns, "envoy.response_headers.limit", []string{"header name", `"a b"`}},
		{"envoy remaining header", "envoy:\n  config_dir: d\n  response_headers: {remaining: \"a:b\"}\n" + ns, "envoy.response_headers.remaining", []string{"header name"}},
		{"envoy reset header", "envoy:\n  config_dir: d\n  response_headers: {reset: \"\\u00e9\"}\n" + ns, "envoy.response_headers.reset", []string{"header name"}},
		{"envoy near_limit_ratio", "envoy: {config_dir: d, near_limit_ratio: 1.5}\n" + ns, "envoy.near_limit_ratio", []string{"between 0 and 1"}},
		{"envoy merge_domain_config not a bool", "envoy: {config_dir: d, merge_domain_config: maybe}\n" + ns, "envoy.merge_domain_config", []string{"cannot unmarshal"}},
		{"resp_addr not host:port", "resp_addr: 6380\n" + ns, "resp_addr", []string{`must be host:port or "off"`, `"6380"`}},
		{"resp negative max_command_size", "resp: {max_command_size: -1}\n" + ns, "resp.max_command_size", []string{"must not be negative"}},
		{"resp negative max_clients", "resp: {max_clients: -5}\n" + ns, "resp.max_clients", []string{"must not be negative"}},
		{"resp negative idle_timeout", "resp: {idle_timeout: -1s}\n" + ns, "resp.idle_timeout", []string{"must not be negative"}},
		{"resp negative max_queued_commands", "resp: {max_queued_commands: -1}\n" + ns, "resp.max_queued_commands", []string{"must not be negative"}},
		{"resp negative max_queued_bytes", "resp: {max_queued_bytes: -1}\n" + ns, "resp.max_queued_bytes", []string{"must not be negative"}},
		{"connections negative max", "connections: {max: -1}\n" + ns, "connections.max", []string{"must not be negative"}},
		{"connections max_per_address over max", "connections: {max: 10, max_per_address: 11}\n" + ns, "connections.max_per_address", []string{"not be more than connections.max"}},
		{"connections negative idle_timeout", "connections: {idle_timeout: -1s}\n" + ns, "connections.idle_timeout", []string{"must not be negative"}},
		{"connections negative read_timeout", "connections: {read_timeout: -1s}\n" + ns, "connections.read_timeout", []string{"must not be negative"}},
		{"connections negative write_timeout", "connections: {write_timeout: -1s}\n" + ns, "connections.write_timeout", []string{"must not be negative"}},
		{"connections max_inflight_bytes under a request", "connections: {max_inflight_bytes: 1000}\n" + ns, "connections.max_inflight_bytes", []string{"at least 16777216"}},
		{"connections negative grpc_max_streams", "connections: {grpc_max_streams: -1}\n" + ns, "connections.grpc_max_streams", []string{"must not be negative"}},
		{"connections negative auth_timeout", "connections: {auth_timeout: -2s}\n" + ns, "connections.auth_timeout", []string{"must not be negative"}},
		{"admin_addr not an address", "admin_addr: a:b:c\n" + ns, "admin_addr", []string{`host:port, a port or "off"`}},
		{"tls key without certificate", "tls: {key_file: k}\n" + ns, "tls.cert_file", []string{"required with key_file"}},
		{"tls certificate without key", "tls: {cert_file: c}\n" + ns, "tls.key_file", []string{"required with cert_file"}},
		{"tls mTLS without CA", "tls: {cert_file: c, key_file: k, client_auth: require}\n" + ns, "tls.client_ca_file", []string{"required with client_auth require"}},
		{"tls client_auth", "tls: {cert_file: c, key_file: k, client_auth: maybe}\n" + ns, "tls.client_auth", []string{"none, request or require", `"maybe"`}},
		{"policy window size not the namespace's", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {window_size: 2s, limit: 1}\n"), "namespaces[0].policies.login.limits[0].window_size", []string{"2s"}},
		{"policy negative limit", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {window_size: 1s, limit: -1}\n"), "namespaces[0].policies.login.limits[0].limit", []string{"between 0 and"}},
		{"policy token max zero", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {token: {max: 0, refill_time: 1s}}\n"), "namespaces[0].policies.login.limits[0].token.max", []string{"got 0"}},
		{"policy token refill_time zero", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {token: {max: 1, refill_time: 0}}\n"), "namespaces[0].policies.login.limits[0].token.refill_time", nil},
		{"policy token refill_amount negative", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {token: {max: 1, refill_time: 1s, refill_amount: -1}}\n"), "namespaces[0].policies.login.limits[0].token.refill_amount", nil},
		{"policy token strict not a bool", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {token: {max: 1, refill_time: 1s, strict: maybe}}\n"), "namespaces[0].policies.login.limits[0].token.strict", []string{"cannot unmarshal"}},
		{"policy leaky size zero", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {leaky: {size: 0, interval: 1s}}\n"), "namespaces[0].policies.login.limits[0].leaky.size", nil},
		{"policy leaky interval negative", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {leaky: {size: 1, interval: -1s}}\n"), "namespaces[0].policies.login.limits[0].leaky.interval", nil},
		{"policy leaky wait_timeout over a minute", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {leaky: {size: 1, interval: 1s, wait_timeout: 2m}}\n"), "namespaces[0].policies.login.limits[0].leaky.wait_timeout", nil},
		{"policy fixed period zero", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {fixed: {period: 0, limit: 1}}\n"), "namespaces[0].policies.login.limits[0].fixed.period", nil},
		{"policy fixed limit too large", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {fixed: {period: 1s, limit: 2e9}}\n"), "namespaces[0].policies.login.limits[0].fixed.limit", nil},
		{"policy no limits", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          []\n"), "namespaces[0].policies.login.limits", []string{"at least one limit"}},
		{"policy two kinds in a limit", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {token: {max: 1, refill_time: 1s}, fixed: {period: 1s, limit: 1}}\n"), "namespaces[0].policies.login.limits[0]", []string{"token and fixed"}},
		{"policy unknown limit field", nsWith("    window_sizes: [1s, 60s]\n    sync_rate: -1\n    policies:\n      login:\n        limits:\n          - {window: 1s, limit: 1}\n"), "namespaces[0].policies.login.limits[0].window", []string{`unknown field "window"`}},
		{"policy shadow not a bool", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    policies:\n      login:\n        limits: [{window_size: 1s, limit: 1}]\n        shadow: maybe\n"), "namespaces[0].policies.login.shadow", []string{"cannot unmarshal"}},
		{"policy name", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    policies:\n      \"log in\":\n        limits: [{window_size: 1s, limit: 1}]\n"), "namespaces[0].policies.log in", []string{"1-64 characters"}},
		{"policy bucket in an estimator", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    estimator: {hashes: 4, slots: 1024}\n    policies:\n      login:\n        limits: [{fixed: {period: 1s, limit: 1}}]\n"), "namespaces[0].policies.login.limits", []string{"estimator"}},
		{"policy windows and buckets synchronous", nsWith("    window_sizes: [1s]\n    sync_rate: 0\n    store: s\n    policies:\n      login:\n        limits: [{window_size: 1s, limit: 1}, {fixed: {period: 1s, limit: 1}}]\n"), "namespaces[0].policies.login.limits", []string{"one or the other"}},
		{"shadow not a bool", nsWith("    window_sizes: [1s]\n    sync_rate: -1\n    shadow: maybe\n"), "namespaces[0].shadow", []string{"cannot unmarshal"}},
		{"tls min_version below 1.2", "tls: {cert_file: c, key_file: k, min_version: 1.1}\n" + ns, "tls.min_version", []string{`"1.2" or "1.3"`, `"1.1"`}},
	}
	cases = append(cases, authCases(ns)...)
	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("conf.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("ParseConfig(%q) = nil error, want one on %s", c.yaml, c.field)
			}
			// Every error is reported: the one the case is about is among
			// them, with its line when the field is in the file.
			var ce *Error
			for _, e := range Flatten(err) {
				if got, ok := e.(*Error); !ok {
					t.Fatalf("error %v is a %T, want *Error", e, e)
				} else if got.Field == c.field && ce == nil {
					ce = got
				}
			}
			if ce == nil {
				t.Fatalf("error %q: no error on field %q", err, c.field)
			}
			if ce.File != "conf.yaml" {
				t.Errorf("error %q: file %q, want conf.yaml", ce, ce.File)
			}
			prefix := "config conf.yaml"
			if ce.Line > 0 {
				prefix += fmt.Sprintf(":%d", ce.Line)
			}
			prefix += ": "
			if c.field != "" {
				prefix += c.field + ": "
				if ce.Line == 0 {
					t.Errorf("error %q has no line", ce)
				}
			}
			if !strings.HasPrefix(ce.Error(), prefix) {
				t.Errorf("error %q does not start with %q", ce, prefix)
			}
			for _, r := range c.reason {
				if !strings.Contains(ce.Reason, r) {
					t.Errorf("reason %q lacks %q", ce.Reason, r)
				}
			}
		})
		covered[normalize(c.field)] = true
	}
	for _, p := range configPaths {
		if !covered[p] {
			t.Errorf("no bad-value case for the field %s", p)
		}
	}
}

// TestConfigStoreTypes: exactly redis, postgres and cassandra pass the type
// check (their options are their packages' business).
func TestConfigStoreTypes(t *testing.T) {
	for _, typ := range []string{"redis", "postgres", "cassandra", "memory", "memcached", "etcd", ""} {
		cfg := DefaultConfig()
		var n yaml.Node
		if err := yaml.Unmarshal([]byte("type: "+typ), &n); err != nil {
			t.Fatal(err)
		}
		var sc StoreConfig
		if err := n.Content[0].Decode(&sc); err != nil {
			t.Fatal(err)
		}
		cfg.Stores = map[string]StoreConfig{"s": sc}
		err := cfg.Validate()
		typeRejected := err != nil && strings.Contains(err.Error(), "stores.s.type: must be one of")
		if want := typ == "redis" || typ == "postgres" || typ == "cassandra"; typeRejected == want {
			t.Errorf("type %q: Validate = %v; want accepted as a type: %v", typ, err, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"1", time.Second}, {"0.1", 100 * time.Millisecond}, {"1.5", 1500 * time.Millisecond}, {"0", 0},
		{"60", time.Minute}, {"-1", -time.Second}, {"1e-3", time.Millisecond}, {" 2 ", 2 * time.Second},
		{"1s", time.Second}, {"100ms", 100 * time.Millisecond}, {"1m", time.Minute}, {"1h30m", 90 * time.Minute},
		{"1e9", 1e9 * time.Second}, {"0.0000000004", 0}, {"0.0000000006", time.Nanosecond}, {"1_000", 1000 * time.Second},
	} {
		got, err := confval.ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "soon", "NaN", "inf", "-Inf", "1e10", "1 s", "0x10", "10d", "9999999999h"} {
		if got, err := confval.ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
	// Through YAML, quoted or not.
	cfg, err := ParseConfig("c.yaml", []byte("namespaces:\n  - {name: a, window_sizes: [1, \"2\", 0.1, \"0.25\", 3m], sync_rate: -1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Duration{Duration(time.Second), Duration(2 * time.Second), Duration(100 * time.Millisecond), Duration(250 * time.Millisecond), Duration(3 * time.Minute)}
	if got := cfg.Namespaces[0].WindowSizes; !reflect.DeepEqual(got, want) {
		t.Errorf("window_sizes = %v, want %v", got, want)
	}
}

// TestConfigTestdata: the corpus files parse or fail as their names say.
func TestConfigTestdata(t *testing.T) {
	valid := map[string]bool{"full.yaml": true, "readme.yaml": true, "local.yaml": true, "empty.yaml": true, "anchors.yaml": false}
	files, _ := filepath.Glob("testdata/config/*.yaml")
	if len(files) < 5 {
		t.Fatalf("testdata/config holds %d files", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseConfig(f, data)
		if want := valid[filepath.Base(f)]; (err == nil) != want {
			t.Errorf("%s: %v; want valid: %v", f, err, want)
		} else if err != nil && !strings.HasPrefix(err.Error(), "config "+f+":") {
			t.Errorf("%s: error %q does not name the file", f, err)
		} else if err == nil {
			if _, err := node.New(cfg.NodeConfigs(), nil); err != nil {
				t.Errorf("%s: node.New: %v", f, err)
			}
		}
	}
}

// FuzzParseConfig: ParseConfig never panics; a config it accepts validates
// again and builds a node; a config it refuses gets a *Error naming
// the file.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "---\n", "~\n", "[]\n", "namespaces: {}\n", "stores: []\n", "stores: {a: ~}\n",
		"namespaces:\n  - ~\n", "namespaces: [{name: x, window_sizes: [.nan], sync_rate: 1}]\n",
		"shutdown_timeout: {a: 1}\n", "sync: {batch_size: 99999999999999999999}\n",
		"a: &a [*a]\n", "namespaces: &n [{name: x, window_sizes: [1], sync_rate: -1}]\nstores: *n\n",
		"node_name: \"\\u0000\"\n", "grpc_addr: \"[::1]:0\"\nhttp_addr: \":0\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "fuzz.yaml" {
				t.Fatalf("error %v (%T) is not a *Error naming the file", err, err)
			}
			if !strings.HasPrefix(err.Error(), "config fuzz.yaml:") {
				t.Fatalf("error %q does not start with the file", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("parsed but does not validate: %v", err)
		}
		if _, err := node.New(cfg.NodeConfigs(), nil); err != nil {
			t.Fatalf("parsed and validated but node.New fails: %v", err)
		}
		for _, nc := range cfg.Namespaces {
			if nc.Store != "" {
				if _, ok := cfg.Stores[nc.Store]; !ok {
					t.Fatalf("namespace %q uses undeclared store %q", nc.Name, nc.Store)
				}
			}
		}
	})
}

// must is v, for a check of a function whose error another case covers.
func must[T any](v T, _ error) T { return v }

// TestSyntaxErrorLine: a YAML syntax error is reported at the line at
// fault, not where yaml.v3 says its enclosing block began.
func TestSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		line       int
		reason     string
	}{
		{"a mapping key indented less than its list item", "grpc_addr: 127.0.0.1:7070\nnamespaces:\n   - name: a\n  window_sizes: [1s]\n", 4, "did not find expected key"},
		{"a field indented less than its entry", "namespaces:\n  - name: a\n    window_sizes: [1s]\n   sync_rate: 1\n", 4, ""},
		{"a key indented more than the others", "grpc_addr: a\nhttp_addr: b\n  log_level: info\n", 3, "mapping values are not allowed"},
		{"a tab", "log_level: info\n\tlog_format: text\n", 2, "tab"},
		{"a quote never closed", "log_level: info\nnode_name: 'edge\nlog_format: text\n", 2, ""},
	} {
		_, err := ParseConfig("f.yaml", []byte(c.yaml))
		ce, ok := errors.AsType[*Error](err)
		if !ok || ce.Line != c.line || !strings.Contains(ce.Reason, c.reason) {
			t.Errorf("%s: %v; want f.yaml:%d: ...%s", c.name, err, c.line, c.reason)
		}
	}
}

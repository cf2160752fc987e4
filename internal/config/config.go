package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/internal/confval"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Config is limiterd's configuration file (YAML).
type Config struct {
	// NodeName names this node for people; defaults to the host name.
	NodeName string `yaml:"node_name"`
	// GRPCAddr is where the gRPC API listens (default 127.0.0.1:7070).
	GRPCAddr string `yaml:"grpc_addr"`
	// GRPCMaxConnectionAge, when set, closes each gRPC connection (with a
	// GOAWAY, after its calls) once it is that old, so that clients
	// reconnect and spread over nodes added since (default 0: never).
	GRPCMaxConnectionAge Duration `yaml:"grpc_max_connection_age"`
	// HTTPAddr serves /metrics, /healthz and /readyz (default 127.0.0.1:7071).
	HTTPAddr string `yaml:"http_addr"`
	// RESPAddr is where the Redis protocol front listens; empty (the
	// default) or "off" turns it off.
	RESPAddr string `yaml:"resp_addr"`
	// RESP tunes the Redis protocol front.
	RESP RESPConfig `yaml:"resp"`
	// Connections bounds every listener's connections, their deadlines
	// and the request bytes held (connections.go).
	Connections ConnectionsConfig `yaml:"connections"`
	// AdminAddr serves /debug/pprof/ (admin.go); empty (the default) or
	// "off" turns it off, a bare port binds loopback.
	AdminAddr string `yaml:"admin_addr"`
	// TLS, when set, secures every listener (tls.go).
	TLS TLSConfig `yaml:"tls"`
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string `yaml:"log_level"`
	// LogFormat is text (the default) or json.
	LogFormat string `yaml:"log_format"`
	// DrainDelay is how long limiterd keeps serving after SIGTERM once
	// its readiness dropped, so that load balancers stop sending it
	// calls first (default 0).
	DrainDelay Duration `yaml:"drain_delay"`
	// StopTimeout bounds the graceful stop of the fronts after the drain
	// delay: calls still running after it are cut off (default 5s).
	StopTimeout Duration `yaml:"stop_timeout"`
	// ShutdownTimeout bounds the final push of every namespace on SIGTERM
	// (default 5s).
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Sync tunes the sync loops of every namespace.
	Sync SyncConfig `yaml:"sync"`
	// Stores are declared once by name; namespaces refer to them.
	Stores map[string]StoreConfig `yaml:"stores"`
	// Namespaces; with none, a "default" namespace (1s and 60s, local only).
	Namespaces []NamespaceConfig `yaml:"namespaces"`
	// Envoy serves Envoy's rate limit service on the gRPC listener.
	Envoy EnvoyConfig `yaml:"envoy"`
	// Auth, when present, requires every call to carry a granted token or
	// client certificate (auth.go).
	Auth *AuthConfig `yaml:"auth"`
	// Tracing, with an endpoint, exports OpenTelemetry traces of the
	// calls and their store round trips (telemetry.go); off by default.
	Tracing TracingConfig `yaml:"tracing"`
}

// TracingConfig is where and how traces are exported (OTLP over gRPC).
type TracingConfig struct {
	// Endpoint is the collector's host:port; empty turns tracing off.
	Endpoint string `yaml:"endpoint"`
	// Insecure exports without TLS (a collector on the same host or pod).
	Insecure bool `yaml:"insecure"`
	// Headers go with every export (a collector's API key).
	Headers map[string]string `yaml:"headers"`
	// SampleRatio is the share of the traces started here that are kept,
	// in [0, 1]; 0 means 1. A caller's sampling decision is followed.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// SyncConfig tunes the sync loops.
type SyncConfig struct {
	// TickTimeout bounds one tick; default max(10 × sync_rate, 1s).
	TickTimeout Duration `yaml:"tick_timeout"`
	// CallTimeout bounds a synchronous namespace's store call (default 250ms).
	CallTimeout Duration `yaml:"call_timeout"`
	// RetryPeriod is a synchronous namespace's background push period (default 1s).
	RetryPeriod Duration `yaml:"retry_period"`
	// BatchSize is the most rows per store call (default 5000).
	BatchSize int `yaml:"batch_size"`
}

// NamespaceConfig is one namespace.
type NamespaceConfig struct {
	Name        string     `yaml:"name"`
	WindowSizes []Duration `yaml:"window_sizes"`
	// SyncRate in seconds: > 0 periodic, 0 synchronous, < 0 local only.
	SyncRate *float64 `yaml:"sync_rate"`
	Store    string   `yaml:"store"`
	MaxKeys  int      `yaml:"max_keys"`
	// MaxBytes is the byte budget of the namespace's keys (node.KeyCost
	// each; 0: node.DefaultMaxBytes, 256 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// OnFull is what a new key gets at max_keys: "refuse" (default) or
	// "evict" (an idle key's place).
	OnFull string `yaml:"on_full"`
	// Escalate is whether a periodic namespace's Allow asks the store to
	// decide near a limit: "auto" or "never"; left out, auto where the
	// store can decide atomically and never where it cannot. Other modes
	// ignore it.
	Escalate string `yaml:"escalate"`
	// Estimator makes the namespace an estimator namespace: count-min
	// sketches of hashes × slots counters per window, local only.
	Estimator *EstimatorConfig `yaml:"estimator"`
	// MaxLeaseTTL is the longest ttl a concurrency lease may ask for
	// (default 1h when 0, at most 168h).
	MaxLeaseTTL Duration `yaml:"max_lease_ttl"`
	// OnStoreDown is what a synchronous namespace's Acquire does when its
	// store cannot be reached: "refuse" (default; UNAVAILABLE) or "local"
	// (decided from this node's own leases, written to the store when it
	// is back). Other modes ignore it.
	OnStoreDown string `yaml:"on_store_down"`
	// Policies are named sets of limits an Allow may name instead of
	// listing its own (policy.go).
	Policies map[string]PolicyConfig `yaml:"policies"`
	// Shadow makes every Allow of the namespace a dry run: counted and
	// answered as it would be, then admitted.
	Shadow bool `yaml:"shadow"`
}

// EstimatorConfig sizes an estimator namespace's sketches.
type EstimatorConfig struct {
	Hashes int `yaml:"hashes"`
	Slots  int `yaml:"slots"`
}

// StoreConfig is one store; Type selects which other fields apply.
type StoreConfig struct {
	Type string `yaml:"type"`
	// Options holds the type's own fields, decoded by the store's package.
	Options yaml.Node `yaml:"-"`

	// secretFiles are the files its secrets were read from, by field.
	secretFiles [][2]string
}

// UnmarshalYAML keeps the whole mapping so the store's package decodes it.
func (s *StoreConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		// A *yaml.TypeError lets the decoder go on to the other fields.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a store must be a mapping", n.Line)}}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" {
			s.Type = n.Content[i+1].Value
		}
	}
	s.Options = *n
	return nil
}

// Duration is a Go duration string ("1s", "100ms") or a bare number of
// seconds.
type Duration = confval.Duration

// Error names the file, the line (0 when unknown), the field and
// the reason. Validation returns an errors.Join of them, one per error.
type Error struct {
	File   string
	Line   int
	Field  string
	Reason string
}

func (e *Error) Error() string { return "config " + e.Position() }

// Position is the error as a compiler would print it:
// "file:line: field: reason", parts unknown left out.
func (e *Error) Position() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	var parts []string
	for _, p := range []string{where, e.Field, e.Reason} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ": ")
}

var (
	linePrefix = regexp.MustCompile(`^line (\d+): `)
	notFound   = regexp.MustCompile(`^field (.*) not found in type \S+$`)
)

// unknownField begins the reason of a field the config does not have.
const unknownField = "unknown field"

// decodeError turns a YAML decoding error into one Error per
// message, each naming its line and field: the decoder's messages give
// only a line ("line 7: cannot unmarshal !!str `x` into int"), so the
// field is found in the document by that line.
func decodeError(file string, data []byte, err error) error {
	msgs := []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msgs = te.Errors
	}
	var root yaml.Node
	parsed := yaml.Unmarshal(data, &root) == nil
	var errs []error
	for _, msg := range msgs {
		ce := &Error{File: file, Reason: msg}
		if m := linePrefix.FindStringSubmatch(msg); m != nil {
			ce.Line, _ = strconv.Atoi(m[1])
			ce.Reason = msg[len(m[0]):]
			if parsed {
				ce.Field = fieldAt(&root, ce.Line, msg)
			}
		}
		if !parsed {
			if l := syntaxLine(data); l > 0 {
				ce.Line = l
			}
		}
		// yaml.v3 names the Go type ("field grpc_adr not found in type
		// config.Config"), which says nothing to whoever wrote the file.
		if m := notFound.FindStringSubmatch(ce.Reason); m != nil {
			ce.Reason = fmt.Sprintf("%s %q", unknownField, m[1])
		}
		errs = append(errs, ce)
	}
	return errors.Join(errs...)
}

// maxSyntaxLines bounds the files whose syntax errors syntaxLine places.
const maxSyntaxLines = 2000

// syntaxLine is the line of a YAML syntax error in data: the first line
// after the longest run of whole lines from the top that still parses.
// yaml.v3 reports where the enclosing block began (an indentation error
// on line 4 of a list that begins on line 1 is "line 1"), not the line
// at fault. 0 when data parses, or is too long to search.
func syntaxLine(data []byte) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxLines {
		return 0
	}
	var v yaml.Node
	last := 0
	for n := 1; n <= len(lines); n++ {
		if yaml.Unmarshal(bytes.Join(lines[:n], nil), &v) == nil {
			last = n
		}
	}
	if last == len(lines) {
		return 0
	}
	return last + 1
}

// fieldAt returns the path ("namespaces[1].window_sizes[0]") of the entry
// at line that msg is about: the one whose key or value msg quotes first,
// else the entries' common parent.
func fieldAt(root *yaml.Node, line int, msg string) string {
	// at is where msg first quotes v, or -1.
	at := func(v string) int {
		best := -1
		for _, q := range []string{strconv.Quote(v), "`" + v + "`", "field " + v + " "} {
			if i := strings.Index(msg, q); i >= 0 && (best < 0 || i < best) {
				best = i
			}
		}
		return best
	}
	var cands []string
	match, matchAt := "", -1
	quoted := func(p string, vs ...string) {
		for _, v := range vs {
			if i := at(v); i >= 0 && (matchAt < 0 || i < matchAt) {
				match, matchAt = p, i
			}
		}
	}
	eachEntry(root, func(p string, k, v *yaml.Node) {
		switch {
		case k != nil && (k.Line == line || (v.Kind == yaml.ScalarNode && v.Line == line)):
			cands = append(cands, p)
			if v.Kind == yaml.ScalarNode {
				quoted(p, k.Value, v.Value)
			} else {
				quoted(p, k.Value)
			}
		case k == nil && v.Kind == yaml.ScalarNode && v.Line == line:
			cands = append(cands, p)
			quoted(p, v.Value)
		}
	})
	if match != "" || len(cands) == 0 {
		return match
	}
	// Several entries on one line (flow style) and none quoted: name
	// their common parent.
	common := cands[0]
	for _, c := range cands[1:] {
		for !strings.HasPrefix(c, common) || (len(c) > len(common) && c[len(common)] != '.' && c[len(common)] != '[') {
			i := strings.LastIndexAny(common, ".[")
			if i < 0 {
				return ""
			}
			common = common[:i]
		}
	}
	return common
}

// DefaultConfig is what limiterd runs with given no file.
func DefaultConfig() Config {
	return Config{GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7071", LogLevel: "info", LogFormat: "text",
		Namespaces: []NamespaceConfig{DefaultNamespace()}}
}

// ParseConfig parses and validates config data, reading no file and no
// environment (Load does); name is used in errors. The error joins every
// *Error found, each with its line when the file shows one.
func ParseConfig(name string, data []byte) (Config, error) {
	cfg, fatal, decodeErr := decodeConfig(name, data)
	if fatal {
		return Config{}, decodeErr
	}
	if errs := validateDecoded(&cfg, Flatten(decodeErr)); len(errs) > 0 {
		return Config{}, placeErrors(name, data, errs)
	}
	return cfg, nil
}

// validateDecoded returns errs, the decoding's errors, and those of
// validating cfg, less those of an entry that did not decode.
func validateDecoded(cfg *Config, errs []error) []error {
	// A field that did not decode holds its default, so the checks of
	// the entry holding it (its namespace, token, section) would report
	// errors that are not in the file. An unknown field leaves nothing
	// half-decoded: its entry is checked.
	var decoded []string
	for _, e := range errs {
		if ce, ok := e.(*Error); ok && ce.Field != "" && !strings.HasPrefix(ce.Reason, unknownField) {
			entry := ce.Field
			if i := strings.LastIndexAny(entry, ".["); i > 0 {
				entry = entry[:i]
			}
			decoded = append(decoded, entry)
		}
	}
	for _, e := range Flatten(cfg.Validate()) {
		if ce, ok := e.(*Error); !ok || !underAny(ce.Field, decoded) {
			errs = append(errs, e)
		}
	}
	return errs
}

// placeErrors names file in every *Error of errs, gives those
// without a line the line of their field in data, and joins them in the
// file's order, errors of the whole file (line 0) first.
func placeErrors(file string, data []byte, errs []error) error {
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // a syntax error leaves root empty
	lines := pathLines(&root)
	for _, e := range errs {
		if ce, ok := e.(*Error); ok && (ce.File == "" || ce.File == file) {
			ce.File = file
			if ce.Line == 0 {
				ce.Line = lineOf(lines, ce.Field)
			}
		}
	}
	slices.SortStableFunc(errs, func(a, b error) int { return errorLine(a) - errorLine(b) })
	return errors.Join(errs...)
}

// errorLine is err's line when it is a *Error, else 0.
func errorLine(err error) int {
	if ce, ok := err.(*Error); ok {
		return ce.Line
	}
	return 0
}

// underAny reports whether field is one of fields or inside one of them.
func underAny(field string, fields []string) bool {
	for _, f := range fields {
		if field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// pathLines maps every entry's path ("namespaces[1].window_sizes[0]") to
// its line: a mapping entry's key, a sequence item's first line.
func pathLines(root *yaml.Node) map[string]int {
	lines := make(map[string]int)
	eachEntry(root, func(p string, k, v *yaml.Node) {
		if k != nil {
			lines[p] = k.Line
		} else {
			lines[p] = v.Line
		}
	})
	return lines
}

// eachEntry calls f with the path ("namespaces[1].window_sizes[0]") of
// every entry under root, parents first: a mapping entry's key and
// value, or a sequence item (k nil) and the item.
func eachEntry(root *yaml.Node, f func(path string, k, v *yaml.Node)) {
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + p
				}
				f(p, k, v)
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				f(p, nil, c)
				walk(c, p)
			}
		}
	}
	walk(root, "")
}

// lineOf is the line of field, or of its nearest enclosing entry in the
// file (a missing field's namespace, say); 0 when none is there.
func lineOf(lines map[string]int, field string) int {
	for field != "" {
		if l, ok := lines[field]; ok {
			return l
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			return 0
		}
		field = field[:i]
	}
	return 0
}

// decodeConfig parses config data over DefaultConfig without validating
// it. Type errors and unknown fields leave the rest decoded; fatal is
// set when nothing could be (a syntax error).
func decodeConfig(name string, data []byte) (cfg Config, fatal bool, err error) {
	cfg = DefaultConfig()
	cfg.Namespaces = nil // the file's, when it has some
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var errs []error
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*yaml.TypeError](err); !ok {
			return Config{}, true, decodeError(name, data, err)
		}
		errs = append(errs, decodeError(name, data, err))
	}
	// A file without namespaces runs the default one; once loaded, it is
	// a namespace like any other (the admin API may remove it).
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []NamespaceConfig{DefaultNamespace()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		errs = append(errs, &Error{File: name, Line: extra.Line, Reason: "a config file holds one YAML document, found a second one"})
	}
	// A count the decoder refused already is not reported twice.
	failed := make(map[string]bool)
	for _, e := range Flatten(joinErrors(errs...)) {
		if ce, ok := e.(*Error); ok {
			failed[ce.Field] = true
		}
	}
	for _, e := range Flatten(checkWholeNumbers(name, data)) {
		if ce, ok := e.(*Error); !ok || !failed[ce.Field] {
			errs = append(errs, e)
		}
	}
	return cfg, false, joinErrors(errs...)
}

// checkWholeNumbers rejects a fractional count ("max_keys: 1.5"), which the
// YAML decoder would silently truncate.
func checkWholeNumbers(file string, data []byte) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	var errs []error
	check := func(field string, v *yaml.Node) {
		if v.Kind == yaml.ScalarNode && v.ShortTag() != "!!int" && v.ShortTag() != "!!null" {
			errs = append(errs, &Error{File: file, Line: v.Line, Field: field, Reason: fmt.Sprintf("must be a whole number, got %q", v.Value)})
		}
	}
	top := root.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		switch k, v := top[i].Value, top[i+1]; {
		case k == "sync" && v.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "batch_size" {
					check("sync.batch_size", v.Content[j+1])
				}
			}
		case k == "namespaces" && v.Kind == yaml.SequenceNode:
			for n, item := range v.Content {
				if item.Kind != yaml.MappingNode {
					continue
				}
				for j := 0; j+1 < len(item.Content); j += 2 {
					if f := item.Content[j].Value; f == "max_keys" || f == "max_bytes" {
						check(fmt.Sprintf("namespaces[%d].%s", n, f), item.Content[j+1])
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// storeTypes are the store types users may configure.
var storeTypes = []string{"redis", "postgres", "cassandra"}

// Validate checks everything that can be checked without connecting and
// returns every error it finds: an errors.Join of *Error, in the
// order of the file's sections.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(c.NodeName) > 253 || !utf8.ValidString(c.NodeName) || strings.ContainsFunc(c.NodeName, unicode.IsControl) {
		bad("node_name", "must be valid UTF-8 of at most 253 bytes without control characters, got %q", c.NodeName)
	}
	if c.GRPCAddr == "" {
		bad("grpc_addr", "must not be empty")
	} else if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		bad("grpc_addr", "must be host:port, got %q", c.GRPCAddr)
	}
	if c.HTTPAddr != "" && c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("http_addr", "must be host:port or \"off\", got %q", c.HTTPAddr)
		}
	}
	if c.RESPAddr != "" && c.RESPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.RESPAddr); err != nil {
			bad("resp_addr", "must be host:port or \"off\", got %q", c.RESPAddr)
		}
	}
	errs = append(errs, c.RESP.validate(), c.Connections.validate())
	if _, err := AdminAddr(c.AdminAddr); err != nil {
		bad("admin_addr", "%v", err)
	}
	errs = append(errs, c.TLS.validate())
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		bad("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "", "text", "json":
	default:
		bad("log_format", "must be text or json, got %q", c.LogFormat)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown_timeout", "must not be negative")
	}
	if c.Tracing.Endpoint != "" {
		if _, _, err := net.SplitHostPort(c.Tracing.Endpoint); err != nil {
			bad("tracing.endpoint", "must be host:port, got %q", c.Tracing.Endpoint)
		}
	}
	if !(c.Tracing.SampleRatio >= 0 && c.Tracing.SampleRatio <= 1) {
		bad("tracing.sample_ratio", "must be between 0 and 1, got %g", c.Tracing.SampleRatio)
	}
	for k := range c.Tracing.Headers {
		if !headerName(k) {
			bad("tracing.headers", "%q is not a header name", k)
		}
	}
	if c.GRPCMaxConnectionAge < 0 {
		bad("grpc_max_connection_age", "must not be negative, got %s", c.GRPCMaxConnectionAge)
	}
	if c.DrainDelay < 0 {
		bad("drain_delay", "must not be negative, got %s", c.DrainDelay)
	}
	if c.StopTimeout < 0 {
		bad("stop_timeout", "must not be negative, got %s", c.StopTimeout)
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"sync.tick_timeout", c.Sync.TickTimeout}, {"sync.call_timeout", c.Sync.CallTimeout}, {"sync.retry_period", c.Sync.RetryPeriod}} {
		if f.d < 0 {
			bad(f.name, "must not be negative, got %s", f.d)
		}
	}
	if c.Sync.BatchSize < 0 {
		bad("sync.batch_size", "must not be negative, got %d", c.Sync.BatchSize)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Stores)) {
		s := c.Stores[name]
		if !contains(storeTypes, s.Type) {
			bad("stores."+name+".type", "must be one of %s, got %q", strings.Join(storeTypes, ", "), s.Type)
			continue
		}
		_, err := validateStore(name, s, nil)
		errs = append(errs, err)
	}
	used := make(map[string]bool)
	var names []string
	for i, nc := range c.NodeConfigs() {
		names = append(names, nc.Name)
		field := fmt.Sprintf("namespaces[%d]", i)
		if used[nc.Name] {
			bad(field+".name", "namespace %q is defined twice", nc.Name)
		}
		used[nc.Name] = true
		n := c.Namespaces[i]
		mode, err := DecodeSyncRate(n.SyncRate)
		if err != nil {
			bad(field+".sync_rate", "%s", err)
		}
		_, local := mode.(clustersync.Local)
		switch {
		case mode == nil || local:
		case n.Estimator != nil:
			bad(field+".sync_rate", "an estimator namespace is local only: sync_rate must be negative, got %g", *n.SyncRate)
			nc.Shared = false // reported here, not again by the node
		case n.Store == "":
			bad(field+".store", "a namespace with sync_rate >= 0 needs a store")
		}
		switch clustersync.StoreDownPolicy(n.OnStoreDown) {
		case "", clustersync.StoreDownRefuse, clustersync.StoreDownLocal:
		default:
			bad(field+".on_store_down", "must be %q or %q, got %q", clustersync.StoreDownRefuse, clustersync.StoreDownLocal, n.OnStoreDown)
		}
		if len(c.Namespaces) > 0 && !contains(escalateModes, c.Namespaces[i].Escalate) {
			bad(field+".escalate", "must be \"auto\" or \"never\", got %q", c.Namespaces[i].Escalate)
		}
		if len(c.Namespaces) > 0 {
			errs = append(errs, validatePolicies(field, c.Namespaces[i].Policies)...)
		}
		if err := nc.Validate(); err != nil {
			var fe *ratelimit.FieldError
			if errors.As(err, &fe) {
				bad(field+"."+fe.Field, "%s", fe.Reason)
			} else {
				bad(field, "%v", err)
			}
		} else if _, sync := mode.(clustersync.Synchronous); sync {
			for _, name := range slices.Sorted(maps.Keys(nc.Policies)) {
				if mixed(nc.Policies[name].Limits) {
					bad(field+".policies."+name+".limits", "a synchronous namespace's store decides windows and buckets apart: a policy holds one or the other")
					break
				}
			}
		}
		if n.Store != "" {
			if st, ok := c.Stores[n.Store]; !ok {
				bad(field+".store", "store %q is not declared under stores", n.Store)
			} else if f, reason := modeRefused(nc.Name, n, mode, n.Store, st.Type); reason != "" {
				bad(field+"."+f, "%s", reason)
			}
		}
	}
	errs = append(errs, c.Envoy.validate(names), c.Auth.validate(names))
	return joinErrors(errs...)
}

// joinErrors is errors.Join of errs, nested joins flattened, so that a
// caller can list each error.
func joinErrors(errs ...error) error {
	var flat []error
	var add func(error)
	add = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
		} else if err != nil {
			flat = append(flat, err)
		}
	}
	for _, e := range errs {
		add(e)
	}
	return errors.Join(flat...)
}

// validateStore checks a store's options, the secrets' sources first
// and then the store package's own checks, and returns the store with
// its secrets resolved by getenv (see resolveStoreSecrets; nil puts
// placeholders in). Fields are prefixed with the store's path, lines
// taken from its YAML.
func validateStore(name string, s StoreConfig, getenv func(string) string) (StoreConfig, error) {
	resolved, err := resolveStoreSecrets(s, getenv)
	if err == nil {
		if _, err = decodeStoreOptions(resolved); err != nil {
			var fe *ratelimit.FieldError
			if errors.As(err, &fe) {
				err = &Error{Field: fe.Field, Reason: fe.Reason}
			} else if _, ok := errors.AsType[*Error](err); !ok {
				err = &Error{Line: s.Options.Line, Reason: err.Error()}
			}
		}
	}
	// The resolved mapping keeps the file's lines, and has the entries
	// (addrs[1]) of values read from files and variables.
	lines := pathLines(&resolved.Options)
	for _, e := range Flatten(err) {
		if ce, ok := e.(*Error); ok {
			if ce.Line == 0 {
				ce.Line = lineOf(lines, ce.Field)
			}
			ce.Field = strings.TrimSuffix("stores."+name+"."+ce.Field, ".")
		}
	}
	return resolved, err
}

// Flatten lists the errors joined in err (err itself when it joins none).
func Flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := joinErrors(err).(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// DefaultNamespace is the namespace of a config that has none: "default",
// 1s and 60s windows, local only.
func DefaultNamespace() NamespaceConfig {
	d := node.DefaultConfig()
	local := -1.0
	nc := NamespaceConfig{Name: d.Name, SyncRate: &local, MaxKeys: d.MaxKeys}
	for _, s := range d.WindowSizes {
		nc.WindowSizes = append(nc.WindowSizes, Duration(s))
	}
	return nc
}

// DecodeSyncRate decodes a namespace's sync_rate, in seconds, into its
// mode: below 0 local, 0 (or -0) synchronous, above 0 periodic with that
// period, from MinSyncRate to MaxSyncRate. It is the one place that reads
// the number's sign. nil (no sync_rate) is an error.
func DecodeSyncRate(v *float64) (clustersync.Mode, error) {
	switch {
	case v == nil:
		return nil, errors.New("is required (> 0 periodic, 0 synchronous, < 0 local only)")
	case math.IsNaN(*v) || math.IsInf(*v, 0):
		return nil, errors.New("must be a finite number of seconds")
	case *v < 0:
		return clustersync.Local{}, nil
	case *v == 0:
		return clustersync.Synchronous{}, nil
	case *v < MinSyncRate:
		return nil, fmt.Errorf("must be at least %g s when positive, got %g", MinSyncRate, *v)
	case *v > MaxSyncRate:
		return nil, fmt.Errorf("must be at most %g s, got %g", MaxSyncRate, *v)
	}
	return clustersync.Periodic{Period: time.Duration(*v * float64(time.Second))}, nil
}

// The bounds of a positive sync_rate, in seconds.
const (
	MinSyncRate = 0.001
	MaxSyncRate = 86400.0
)

// mode is n's decoded mode; local when its sync_rate is invalid (which
// Validate reports).
func (n NamespaceConfig) mode() clustersync.Mode {
	m, err := DecodeSyncRate(n.SyncRate)
	if err != nil {
		return clustersync.Local{}
	}
	return m
}

// NamespaceMode returns the mode of the namespace called name (local
// when there is none of that name).
func (c *Config) NamespaceMode(name string) clustersync.Mode {
	for _, n := range c.Namespaces {
		if n.Name == name {
			return n.mode()
		}
	}
	return clustersync.Local{}
}

// NodeConfigs returns the namespaces as node configs.
func (c *Config) NodeConfigs() []node.Config {
	out := make([]node.Config, len(c.Namespaces))
	for i, n := range c.Namespaces {
		nc := node.Config{Name: n.Name, MaxKeys: n.MaxKeys, MaxBytes: n.MaxBytes, OnFull: node.KeyCapPolicy(n.OnFull),
			MaxLeaseTTL: time.Duration(n.MaxLeaseTTL)}
		if n.Estimator != nil {
			nc.Estimator = &node.EstimatorConfig{Hashes: n.Estimator.Hashes, Slots: n.Estimator.Slots}
		}
		nc.Policies, nc.Shadow = nodePolicies(n.Policies), n.Shadow
		switch m := n.mode().(type) {
		case clustersync.Periodic:
			// A lease key in use keeps its others' count from one sync
			// to the next.
			nc.Shared, nc.LeaseIdle = true, 4*m.Period
		case clustersync.Synchronous:
			nc.Shared = true
		}
		for _, d := range n.WindowSizes {
			nc.WindowSizes = append(nc.WindowSizes, time.Duration(d))
		}
		out[i] = nc
	}
	return out
}

// mixed reports whether limits hold sliding windows and buckets.
func mixed(limits []ratelimit.Limit) bool {
	windows := slices.ContainsFunc(limits, func(l ratelimit.Limit) bool { return l.Kind == ratelimit.WindowLimit })
	buckets := slices.ContainsFunc(limits, func(l ratelimit.Limit) bool { return l.Kind != ratelimit.WindowLimit })
	return windows && buckets
}

// modeRefused names the field and the reason when the store of type typ
// cannot serve the namespace's mode (a synchronous namespace, or
// escalate: auto, needs an atomic decision); reason is "" when it can.
// escalate left out asks only for what the store can do.
func modeRefused(ns string, n NamespaceConfig, mode clustersync.Mode, store, typ string) (field, reason string) {
	has, known := storeAbilities[typ]
	if !known {
		return "", "" // reported with the store
	}
	field = "sync_rate"
	if _, periodic := mode.(clustersync.Periodic); periodic {
		field = "escalate"
	}
	need := clustersync.Needs(mode, n.Escalate == "auto")
	if has.Has(need) {
		return "", ""
	}
	how := map[string]string{
		"sync_rate": "which a synchronous namespace (sync_rate 0) needs: make it periodic (sync_rate > 0)",
		"escalate":  "which escalate: auto needs: leave escalate out or set it to never",
	}[field]
	return field, fmt.Sprintf("namespace %q: store %q (%s) has no %s, %s, or use a store that has it", ns, store, typ, need&^has, how)
}

// escalateModes are the values of a namespace's escalate ("": auto).
var escalateModes = []string{"", "auto", "never"}

// NamespaceSyncerConfig returns the sync loop's tuning of the namespace
// called name: SyncerConfig with its escalate option.
func (c *Config) NamespaceSyncerConfig(name string) clustersync.Config {
	sc := c.SyncerConfig()
	for _, n := range c.Namespaces {
		if n.Name == name {
			sc.NoEscalate = n.Escalate == "never"
			sc.OnStoreDown = clustersync.StoreDownPolicy(n.OnStoreDown)
			sc.StoreName = n.Store
		}
	}
	return sc
}

// SyncerConfig returns the sync loops' tuning.
func (c *Config) SyncerConfig() clustersync.Config {
	return clustersync.Config{
		TickTimeout:     time.Duration(c.Sync.TickTimeout),
		CallTimeout:     time.Duration(c.Sync.CallTimeout),
		RetryPeriod:     time.Duration(c.Sync.RetryPeriod),
		ShutdownTimeout: time.Duration(c.ShutdownTimeout),
		BatchSize:       c.Sync.BatchSize,
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

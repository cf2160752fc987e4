package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
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
	clustersync "github.com/limiterd/limiterd/sync"
)

// Config is limiterd's configuration file (YAML).
type Config struct {
	// NodeName names this node for people; defaults to the host name.
	NodeName string `yaml:"node_name"`
	// GRPCAddr is where the gRPC API listens (default 127.0.0.1:7070).
	GRPCAddr string `yaml:"grpc_addr"`
	// HTTPAddr serves /metrics, /healthz and /readyz (default 127.0.0.1:7071).
	HTTPAddr string `yaml:"http_addr"`
	// RESPAddr is where the Redis protocol front listens; empty (the
	// default) or "off" turns it off.
	RESPAddr string `yaml:"resp_addr"`
	// RESP tunes the Redis protocol front.
	RESP RESPConfig `yaml:"resp"`
	// AdminAddr serves /debug/pprof/ (admin.go); empty (the default) or
	// "off" turns it off, a bare port binds loopback.
	AdminAddr string `yaml:"admin_addr"`
	// TLS, when set, secures every listener (tls.go).
	TLS TLSConfig `yaml:"tls"`
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string `yaml:"log_level"`
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
	// OnFull is what a new key gets at max_keys: "refuse" (default) or
	// "evict" (an idle key's place).
	OnFull string `yaml:"on_full"`
	// Escalate is whether a periodic namespace's Allow asks the store to
	// decide near a limit: "auto" (default) or "never". Other modes
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
}

// UnmarshalYAML keeps the whole mapping so the store's package decodes it.
func (s *StoreConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a store must be a mapping", n.Line)
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

// ConfigError names the file, the field and the reason.
type ConfigError struct {
	File, Field, Reason string
}

func (e *ConfigError) Error() string {
	where := "config"
	if e.File != "" {
		where += " " + e.File
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", where, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", where, e.Field, e.Reason)
}

var errorLine = regexp.MustCompile(`^line (\d+): `)

// decodeError turns a YAML decoding error into a ConfigError naming the
// field: the decoder's messages give only a line ("line 7: cannot unmarshal
// !!str `x` into int"), so the field is found in the document by that line.
func decodeError(file string, data []byte, err error) *ConfigError {
	msgs := []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msgs = te.Errors
	}
	ce := &ConfigError{File: file, Reason: strings.Join(msgs, "; ")}
	m := errorLine.FindStringSubmatch(msgs[0])
	if m == nil {
		return ce
	}
	line, _ := strconv.Atoi(m[1])
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil {
		ce.Field = fieldAt(&root, line, msgs[0])
	}
	return ce
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
					p = path + "." + k.Value
				}
				if k.Line == line || (v.Kind == yaml.ScalarNode && v.Line == line) {
					cands = append(cands, p)
					if v.Kind == yaml.ScalarNode {
						quoted(p, k.Value, v.Value)
					} else {
						quoted(p, k.Value)
					}
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Kind == yaml.ScalarNode && c.Line == line {
					cands = append(cands, p)
					quoted(p, c.Value)
				}
				walk(c, p)
			}
		}
	}
	walk(root, "")
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
	return Config{GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7071", LogLevel: "info"}
}

// LoadConfig reads and validates a config file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, &ConfigError{File: path, Reason: err.Error()}
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates config data; name is used in errors.
func ParseConfig(name string, data []byte) (Config, error) {
	cfg, err := decodeConfig(name, data)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.File = name
		}
		return Config{}, err
	}
	return cfg, nil
}

// decodeConfig parses config data over DefaultConfig without validating it.
func decodeConfig(name string, data []byte) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, decodeError(name, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, &ConfigError{File: name, Reason: "a config file holds one YAML document, found a second one"}
	}
	if err := checkWholeNumbers(name, data); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// checkWholeNumbers rejects a fractional count ("max_keys: 1.5"), which the
// YAML decoder would silently truncate.
func checkWholeNumbers(file string, data []byte) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	check := func(field string, v *yaml.Node) error {
		if v.Kind == yaml.ScalarNode && v.ShortTag() != "!!int" && v.ShortTag() != "!!null" {
			return &ConfigError{File: file, Field: field, Reason: fmt.Sprintf("line %d: must be a whole number, got %q", v.Line, v.Value)}
		}
		return nil
	}
	top := root.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		switch k, v := top[i].Value, top[i+1]; {
		case k == "sync" && v.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "batch_size" {
					if err := check("sync.batch_size", v.Content[j+1]); err != nil {
						return err
					}
				}
			}
		case k == "namespaces" && v.Kind == yaml.SequenceNode:
			for n, item := range v.Content {
				if item.Kind != yaml.MappingNode {
					continue
				}
				for j := 0; j+1 < len(item.Content); j += 2 {
					if item.Content[j].Value == "max_keys" {
						if err := check(fmt.Sprintf("namespaces[%d].max_keys", n), item.Content[j+1]); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

// storeTypes are the store types users may configure.
var storeTypes = []string{"redis", "postgres", "cassandra"}

// Validate checks everything that can be checked without connecting.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(c.NodeName) > 253 || !utf8.ValidString(c.NodeName) || strings.ContainsFunc(c.NodeName, unicode.IsControl) {
		return bad("node_name", "must be valid UTF-8 of at most 253 bytes without control characters, got %q", c.NodeName)
	}
	if c.GRPCAddr == "" {
		return bad("grpc_addr", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return bad("grpc_addr", "must be host:port, got %q", c.GRPCAddr)
	}
	if c.HTTPAddr != "" && c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return bad("http_addr", "must be host:port or \"off\", got %q", c.HTTPAddr)
		}
	}
	if c.RESPAddr != "" && c.RESPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.RESPAddr); err != nil {
			return bad("resp_addr", "must be host:port or \"off\", got %q", c.RESPAddr)
		}
	}
	if err := c.RESP.validate(); err != nil {
		return err
	}
	if _, err := adminAddr(c.AdminAddr); err != nil {
		return bad("admin_addr", "%v", err)
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return bad("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.ShutdownTimeout < 0 {
		return bad("shutdown_timeout", "must not be negative")
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"sync.tick_timeout", c.Sync.TickTimeout}, {"sync.call_timeout", c.Sync.CallTimeout}, {"sync.retry_period", c.Sync.RetryPeriod}} {
		if f.d < 0 {
			return bad(f.name, "must not be negative, got %s", time.Duration(f.d))
		}
	}
	if c.Sync.BatchSize < 0 {
		return bad("sync.batch_size", "must not be negative, got %d", c.Sync.BatchSize)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Stores)) {
		s := c.Stores[name]
		if !contains(storeTypes, s.Type) {
			return bad("stores."+name+".type", "must be one of %s, got %q", strings.Join(storeTypes, ", "), s.Type)
		}
		if _, err := decodeStoreOptions(s); err != nil {
			var fe *node.FieldError
			if errors.As(err, &fe) {
				return bad("stores."+name+"."+fe.Field, "%s", fe.Reason)
			}
			return bad("stores."+name, "%v", err)
		}
	}
	used := make(map[string]bool)
	var names []string
	for i, nc := range c.NodeConfigs() {
		names = append(names, nc.Name)
		field := fmt.Sprintf("namespaces[%d]", i)
		if used[nc.Name] {
			return bad(field+".name", "namespace %q is defined twice", nc.Name)
		}
		used[nc.Name] = true
		if len(c.Namespaces) > 0 && c.Namespaces[i].SyncRate == nil {
			return bad(field+".sync_rate", "is required (> 0 periodic, 0 synchronous, < 0 local only)")
		}
		if len(c.Namespaces) > 0 && !contains(escalateModes, c.Namespaces[i].Escalate) {
			return bad(field+".escalate", "must be \"auto\" or \"never\", got %q", c.Namespaces[i].Escalate)
		}
		if err := nc.Validate(); err != nil {
			var fe *node.FieldError
			if errors.As(err, &fe) {
				return bad(field+"."+fe.Field, "%s", fe.Reason)
			}
			return bad(field, "%v", err)
		}
		if nc.Store != "" {
			if _, ok := c.Stores[nc.Store]; !ok {
				return bad(field+".store", "store %q is not declared under stores", nc.Store)
			}
		}
	}
	if err := c.Envoy.validate(names); err != nil {
		return err
	}
	return c.Auth.validate(names)
}

// NodeConfigs returns the namespaces as node configs; the default namespace
// when none is configured.
func (c *Config) NodeConfigs() []node.Config {
	if len(c.Namespaces) == 0 {
		return []node.Config{node.DefaultConfig()}
	}
	out := make([]node.Config, len(c.Namespaces))
	for i, n := range c.Namespaces {
		nc := node.Config{Name: n.Name, Store: n.Store, MaxKeys: n.MaxKeys, SyncRate: -1, OnFull: node.KeyCapPolicy(n.OnFull),
			MaxLeaseTTL: time.Duration(n.MaxLeaseTTL), OnStoreDown: node.StoreDownPolicy(n.OnStoreDown)}
		if n.Estimator != nil {
			nc.Estimator = &node.EstimatorConfig{Hashes: n.Estimator.Hashes, Slots: n.Estimator.Slots}
		}
		if n.SyncRate != nil {
			nc.SyncRate = *n.SyncRate
		}
		for _, d := range n.WindowSizes {
			nc.WindowSizes = append(nc.WindowSizes, time.Duration(d))
		}
		out[i] = nc
	}
	return out
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

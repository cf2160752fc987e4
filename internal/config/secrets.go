package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// secretField is a store option that may be given as a literal, as
// <name>_file (a file read at start, trailing newline trimmed) or as
// <name>_env (an environment variable), so that addresses, DSNs and
// passwords need not be written in the config file.
type secretField struct {
	name string
	// list fields (addresses) take a comma- or space-separated list from
	// a file or a variable.
	list bool
	// placeholder stands in for the value when the config is checked
	// without reading files or the environment.
	placeholder string
}

// secretFields are the options of a store type that may come from a
// file or the environment.
func secretFields(storeType string) []secretField {
	user := []secretField{{name: "username", placeholder: "limiterd"}, {name: "password", placeholder: "secret"}}
	switch storeType {
	case "redis":
		return append([]secretField{{name: "addrs", list: true, placeholder: "127.0.0.1:6379"}}, user...)
	case "postgres":
		return []secretField{{name: "dsn", placeholder: "postgres://localhost/limiterd"}}
	case "cassandra":
		return append([]secretField{{name: "hosts", list: true, placeholder: "127.0.0.1"}}, user...)
	}
	return nil
}

// resolveStoreSecrets returns s with every <field>_file and <field>_env
// replaced by <field> and its value, read with getenv and os.ReadFile; a
// nil getenv reads nothing and puts placeholders in, to check the config
// alone. Errors are *Error naming the field (relative to the
// store) and its line; values never appear in them.
func resolveStoreSecrets(s StoreConfig, getenv func(string) string) (StoreConfig, error) {
	fields := secretFields(s.Type)
	n := s.Options
	if len(fields) == 0 || n.Kind != yaml.MappingNode {
		return s, nil
	}
	sources := make(map[string][]*yaml.Node) // key nodes by field
	var kept []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		base, ok := strings.CutSuffix(k.Value, "_file")
		if !ok {
			base, _ = strings.CutSuffix(k.Value, "_env")
		}
		if !slices.ContainsFunc(fields, func(f secretField) bool { return f.name == base }) {
			kept = append(kept, k, n.Content[i+1])
			continue
		}
		sources[base] = append(sources[base], k)
		if k.Value == base {
			kept = append(kept, k, n.Content[i+1])
		}
	}
	var errs []error
	bad := func(k *yaml.Node, format string, args ...any) {
		errs = append(errs, &Error{Line: k.Line, Field: k.Value, Reason: fmt.Sprintf(format, args...)})
	}
	for _, f := range fields {
		keys := sources[f.name]
		if len(keys) > 1 {
			bad(keys[1], "give only one of %[1]s, %[1]s_file and %[1]s_env", f.name)
			continue
		}
		if len(keys) == 0 || keys[0].Value == f.name {
			continue
		}
		k := keys[0]
		v := n.Content[slices.Index(n.Content, k)+1]
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			bad(k, "must be a file name or an environment variable's name")
			continue
		}
		value := f.placeholder
		switch {
		case getenv == nil:
		case strings.HasSuffix(k.Value, "_env"):
			if value = getenv(v.Value); value == "" {
				bad(k, "environment variable %s is empty or unset", v.Value)
				continue
			}
		default:
			data, err := os.ReadFile(v.Value)
			if err != nil {
				bad(k, "%v", err)
				continue
			}
			s.secretFiles = append(s.secretFiles, [2]string{k.Value, v.Value})
			if value = strings.TrimRight(string(data), "\r\n"); value == "" {
				bad(k, "%s is empty", v.Value)
				continue
			}
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.name, Line: k.Line, Column: k.Column}
		val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, Line: v.Line, Column: v.Column}
		if f.list {
			val = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: v.Line, Column: v.Column}
			for _, item := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
				val.Content = append(val.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: item, Line: v.Line})
			}
		}
		kept = append(kept, key, val)
	}
	n.Content = kept
	s.Options = n
	return s, errors.Join(errs...)
}

// loadStoreSecrets reads every store's secrets from files and the
// environment (the config is validated already) and checks the values
// read.
func (c *Config) loadStoreSecrets(getenv func(string) string) error {
	var errs []error
	stores := make(map[string]StoreConfig, len(c.Stores))
	for name, s := range c.Stores {
		resolved, err := validateStore(name, s, getenv)
		errs = append(errs, Flatten(err)...)
		stores[name] = resolved
	}
	c.Stores = stores
	// Sorted by field so the order does not follow the map's.
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// ReadableByAll lists the files holding secrets — token files, the TLS
// key, the stores' secret files — whose permissions let every user of the
// host read them, each as "field: path". limiterd warns of them and
// serves on: a secret mounted by Kubernetes is such a file by default
// (defaultMode 0644) in a container where limiterd is the only user, and
// refusing it would stop a running deployment at its next restart.
func (c *Config) ReadableByAll() []string {
	var out []string
	check := func(field, path string) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o004 != 0 {
			out = append(out, fmt.Sprintf("%s: %s (mode %s)", field, path, fi.Mode().Perm()))
		}
	}
	if c.Auth != nil {
		for i, t := range c.Auth.Tokens {
			if t.TokenFile != "" {
				check(fmt.Sprintf("auth.tokens[%d].token_file", i), t.TokenFile)
			}
		}
	}
	if c.TLS.KeyFile != "" {
		check("tls.key_file", c.TLS.KeyFile)
	}
	names := slices.Sorted(maps.Keys(c.Stores))
	for _, name := range names {
		for _, f := range c.Stores[name].secretFiles {
			check(fmt.Sprintf("stores.%s.%s", name, f[0]), f[1])
		}
	}
	return out
}

package envoyfront

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/limiterd/limiterd/service"
	"gopkg.in/yaml.v3"
)

// The YAML of an envoyproxy/ratelimit domain file.
type (
	domainFile struct {
		Domain      string           `yaml:"domain"`
		Descriptors []descriptorYAML `yaml:"descriptors"`
	}
	descriptorYAML struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value"`
		RateLimit      *rateLimitYAML   `yaml:"rate_limit"`
		Descriptors    []descriptorYAML `yaml:"descriptors"`
		ShadowMode     bool             `yaml:"shadow_mode"`
		DetailedMetric bool             `yaml:"detailed_metric"`
	}
	rateLimitYAML struct {
		Name            string        `yaml:"name"`
		Replaces        []replaceYAML `yaml:"replaces"`
		Unit            string        `yaml:"unit"`
		RequestsPerUnit *uint32       `yaml:"requests_per_unit"`
		Unlimited       bool          `yaml:"unlimited"`
	}
	replaceYAML struct {
		Name string `yaml:"name"`
	}
)

// units are the units of a rate_limit and the window size of each.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
}

// rules is one loaded configuration: every domain's descriptor tree. It is
// never changed after loading, so calls read it without a lock.
type rules struct {
	domains map[string]*rulesNode
	files   int
}

// rulesNode is one descriptor of the tree (the root of a domain has no key).
type rulesNode struct {
	key, value string
	wildcard   bool   // value is a prefix (the file's value ended in "*")
	path       string // the configured path, "key_value.key", for metrics
	detailed   bool   // detailed_metric here or above
	limit      *rule  // nil: no rate_limit
	children   map[entry]*rulesNode
	wildcards  []*rulesNode // children with a wildcard value, in file order
}

// entry is a child's identity: key and value ("" for a key alone).
type entry struct{ key, value string }

// rule is a descriptor's rate_limit.
type rule struct {
	domain   string
	path     string
	name     string
	replaces []string
	unit     string
	perUnit  uint32
	// multiplier is an override's unit_multiplier (0 or 1: none).
	multiplier uint32
	size       time.Duration
	unlimited  bool
	shadow     bool
	detailed   bool
	metrics    *ruleMetrics // set when the rules are installed
}

// match returns the node a request descriptor's entries reach from root,
// or nil when they match none.
func (root *rulesNode) match(entries []*ratelimitv3.RateLimitDescriptor_Entry) *rulesNode {
	n := root
	for _, e := range entries {
		key, value := e.GetKey(), e.GetValue()
		next := n.children[entry{key, value}]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == key && strings.HasPrefix(value, w.value) {
					next = w
					break
				}
			}
		}
		if next == nil {
			next = n.children[entry{key, ""}]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// RulesError is a domain file that does not load: the file, where in it
// and why.
type RulesError struct {
	File, Field, Reason string
	// Err is the YAML decoder's error, when it is why.
	Err error
}

func (e *RulesError) Unwrap() error { return e.Err }

func (e *RulesError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("envoy rules %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("envoy rules %s: %s: %s", e.File, e.Field, e.Reason)
}

// CheckDir loads the domain files of dir as New would, for a namespace
// with window sizes sizes, and returns why they do not load (a
// *RulesError when a file is at fault).
func CheckDir(dir string, sizes []time.Duration, namespace string) error {
	_, err := loadDir(dir, sizes, namespace)
	return err
}

// loadDir reads every *.yaml and *.yml file of dir (not its
// subdirectories, nor files whose names start with a dot) and checks every
// limit's window size against sizes.
func loadDir(dir string, sizes []time.Duration, namespace string) (*rules, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy rules: %w", err)
	}
	rs := &rules{domains: map[string]*rulesNode{}}
	from := map[string]string{}
	for _, de := range ents {
		name := de.Name()
		if !ruleFile(name) || de.IsDir() {
			continue
		}
		file := filepath.Join(dir, name)
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, &RulesError{File: file, Reason: err.Error()}
		}
		root, domain, err := parseDomain(data, sizes, namespace)
		if err != nil {
			var re *RulesError
			if errors.As(err, &re) {
				re.File = file
				return nil, re
			}
			return nil, &RulesError{File: file, Reason: err.Error()}
		}
		if prev, ok := from[domain]; ok {
			return nil, &RulesError{File: file, Field: "domain", Reason: fmt.Sprintf("domain %q is also defined in %s", domain, prev)}
		}
		from[domain] = file
		rs.domains[domain] = root
		rs.files++
	}
	return rs, nil
}

// ruleFile reports whether a directory entry's name is a rules file.
func ruleFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// parseDomain parses one domain file into its tree.
func parseDomain(data []byte, sizes []time.Duration, namespace string) (*rulesNode, string, error) {
	var f domainFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, "", &RulesError{Reason: "empty file"}
		}
		return nil, "", &RulesError{Reason: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	if f.Domain == "" {
		return nil, "", &RulesError{Field: "domain", Reason: "is required"}
	}
	root := &rulesNode{}
	if err := addDescriptors(root, f.Domain, "descriptors", f.Descriptors, sizes, namespace); err != nil {
		return nil, "", err
	}
	return root, f.Domain, nil
}

// addDescriptors adds ds under parent; field is their place in the file.
func addDescriptors(parent *rulesNode, domain, field string, ds []descriptorYAML, sizes []time.Duration, namespace string) error {
	for i, d := range ds {
		at := fmt.Sprintf("%s[%d]", field, i)
		if d.Key == "" {
			return &RulesError{Field: at + ".key", Reason: "is required"}
		}
		n := &rulesNode{key: d.Key, value: d.Value, detailed: parent.detailed || d.DetailedMetric}
		n.path = d.Key
		if d.Value != "" {
			n.path += "_" + d.Value
		}
		if parent.path != "" {
			n.path = parent.path + "." + n.path
		}
		if v, ok := strings.CutSuffix(d.Value, "*"); ok {
			n.wildcard, n.value = true, v
		}
		if d.RateLimit != nil {
			r, err := newRule(domain, n.path, d, sizes, namespace)
			if err != nil {
				return &RulesError{Field: at + ".rate_limit", Reason: err.Error()}
			}
			r.detailed = n.detailed
			n.limit = r
		}
		if err := addDescriptors(n, domain, at+".descriptors", d.Descriptors, sizes, namespace); err != nil {
			return err
		}
		if n.wildcard {
			for _, w := range parent.wildcards {
				if w.key == n.key && w.value == n.value {
					return &RulesError{Field: at, Reason: fmt.Sprintf("duplicate descriptor %q", n.path)}
				}
			}
			parent.wildcards = append(parent.wildcards, n)
			continue
		}
		if parent.children == nil {
			parent.children = map[entry]*rulesNode{}
		}
		e := entry{n.key, n.value}
		if _, dup := parent.children[e]; dup {
			return &RulesError{Field: at, Reason: fmt.Sprintf("duplicate descriptor %q", n.path)}
		}
		parent.children[e] = n
	}
	return nil
}

// newRule checks a descriptor's rate_limit.
func newRule(domain, path string, d descriptorYAML, sizes []time.Duration, namespace string) (*rule, error) {
	rl := d.RateLimit
	r := &rule{domain: domain, path: path, name: rl.Name, shadow: d.ShadowMode, unlimited: rl.Unlimited}
	for j, rep := range rl.Replaces {
		if rep.Name == "" {
			return nil, fmt.Errorf("replaces[%d].name is required", j)
		}
		r.replaces = append(r.replaces, rep.Name)
	}
	if rl.Unlimited {
		if rl.Unit != "" {
			return nil, errors.New("an unlimited rate_limit takes no unit")
		}
		return r, nil
	}
	r.unit = strings.ToLower(rl.Unit)
	size, ok := units[r.unit]
	if !ok {
		return nil, fmt.Errorf("unit must be second, minute, hour or day, got %q", rl.Unit)
	}
	if rl.RequestsPerUnit == nil {
		return nil, errors.New("requests_per_unit is required")
	}
	if !slices.Contains(sizes, size) {
		have := make([]string, len(sizes))
		for i, s := range sizes {
			have[i] = service.FormatDuration(s)
		}
		sort.Strings(have)
		return nil, fmt.Errorf("unit %s needs the window size %s in namespace %q, which has %s", r.unit, service.FormatDuration(size), namespace, strings.Join(have, ", "))
	}
	r.size, r.perUnit = size, *rl.RequestsPerUnit
	return r, nil
}

// remaining converts a status's remaining hits to Envoy's whole requests.
func remaining(v float64) uint32 {
	switch {
	case v <= 0 || math.IsNaN(v):
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

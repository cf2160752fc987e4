package envoyfront

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
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
		QuotaMode      bool             `yaml:"quota_mode"`
		DetailedMetric bool             `yaml:"detailed_metric"`
		ValueToMetric  bool             `yaml:"value_to_metric"`
		ShareThreshold bool             `yaml:"share_threshold"`
		// Metadata is accepted and not used: it goes only into the
		// dynamic metadata of envoyproxy/ratelimit's responses, which
		// limiterd does not send.
		Metadata map[string]any `yaml:"metadata"`
	}
	rateLimitYAML struct {
		Name            string        `yaml:"name"`
		Replaces        []replaceYAML `yaml:"replaces"`
		Unit            string        `yaml:"unit"`
		RequestsPerUnit uint32        `yaml:"requests_per_unit"` // absent: 0, as upstream
		Unlimited       bool          `yaml:"unlimited"`
	}
	replaceYAML struct {
		Name string `yaml:"name"`
	}
)

// place is where in a domain file a field means something.
type place uint8

const (
	atRoot place = 1 << iota
	atDescriptor
	atRateLimit
	atReplace
)

// fields are the fields of envoyproxy/ratelimit's domain files and where
// each means something. Its loader takes any of them anywhere and ignores
// one out of place; so does limiterd, with a warning.
var fields = map[string]place{
	"domain": atRoot, "descriptors": atRoot | atDescriptor,
	"key": atDescriptor, "value": atDescriptor, "rate_limit": atDescriptor, "shadow_mode": atDescriptor,
	"quota_mode": atDescriptor, "detailed_metric": atDescriptor, "value_to_metric": atDescriptor,
	"share_threshold": atDescriptor, "metadata": atDescriptor,
	"unit": atRateLimit, "requests_per_unit": atRateLimit, "unlimited": atRateLimit, "replaces": atRateLimit,
	"name": atRateLimit | atReplace,
}

// boolFields are the fields that are booleans.
var boolFields = map[string]bool{"shadow_mode": true, "quota_mode": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true, "unlimited": true}

// units are the units of a rate_limit and the window size of each
// (upstream's: a month is 30 days, a year 365).
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// unitNames lists the units for messages.
const unitNames = "second, minute, hour, day, week, month or year"

// rules is one loaded configuration: every domain's descriptor tree. It is
// never changed after loading, so calls read it without a lock.
type rules struct {
	domains map[string]*rulesNode
	files   int
	// warnings are fields out of place, which have no effect.
	warnings []string
}

// rulesNode is one descriptor of the tree (the root of a domain has no key).
type rulesNode struct {
	key, value string
	by         matchKind
	parts      []string // a wildcard value split at each "*"
	share      bool     // share_threshold: the values a wildcard matches share one counter
	toMetric   bool     // value_to_metric: the request's value in the metric path
	path       string   // the configured path, "key_value.key", for metrics
	limit      *rule    // nil: no rate_limit
	children   map[entry]*rulesNode
	wildcards  []*rulesNode // children with a wildcard value, in file order
}

// matchKind is how a request entry reaches a node.
type matchKind uint8

const (
	byValue    matchKind = iota // key and value
	byWildcard                  // key, and the value matches a value with "*"
	byKey                       // the key alone (the node has no value)
)

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
	quota      bool
	detailed   bool
	// levels are the nodes from the domain down to the rule's, one per
	// entry of the request descriptors it applies to (none for an
	// override).
	levels []*rulesNode
	// shared: a level has share_threshold; toMetric: one has
	// value_to_metric.
	shared, toMetric bool
	metrics          *ruleMetrics // set when the rules are installed
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
				if w.key == key && wildcardMatch(w.parts, value) {
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

// wildcardMatch reports whether s matches the value split into parts at
// each "*", a "*" matching any run of bytes, the empty one included.
func wildcardMatch(parts []string, s string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	if !strings.HasSuffix(s, last) {
		return false
	}
	s = s[:len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// RulesError is a domain file that does not load: the file, where in it
// and why.
type RulesError struct {
	File  string
	Line  int // 0: unknown
	Field string
	// Reason is why.
	Reason string
	// Err is the YAML decoder's error, when it is why.
	Err error
}

func (e *RulesError) Unwrap() error { return e.Err }

func (e *RulesError) Error() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("envoy rules %s: %s", where, e.Reason)
	}
	return fmt.Sprintf("envoy rules %s: %s: %s", where, e.Field, e.Reason)
}

// CheckDir loads the domain files of cfg.Dir as New would, for a
// namespace (cfg.Namespace) with window sizes sizes, and returns why they
// do not load (a *RulesError when a file is at fault).
func CheckDir(cfg Config, sizes []time.Duration) error {
	_, err := loadDir(cfg.withDefaults(), sizes)
	return err
}

// loadDir reads every *.yaml and *.yml file of cfg.Dir (not its
// subdirectories, nor files whose names start with a dot), in the order of
// their names, and checks every limit's window size against sizes.
func loadDir(cfg Config, sizes []time.Duration) (*rules, error) {
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("envoy rules: %w", err)
	}
	l := newLoader(cfg, sizes)
	for _, de := range ents {
		name := de.Name()
		if !ruleFile(name) || de.IsDir() {
			continue
		}
		file := filepath.Join(cfg.Dir, name)
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, &RulesError{File: file, Reason: err.Error()}
		}
		if _, err := l.load(file, data); err != nil {
			return nil, err
		}
		l.rs.files++
	}
	return l.rs, nil
}

// ruleFile reports whether a directory entry's name is a rules file.
func ruleFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// parseDomain parses one domain file into its tree.
func parseDomain(data []byte, sizes []time.Duration, namespace string) (*rulesNode, string, error) {
	l := newLoader(Config{Namespace: namespace}, sizes)
	domain, err := l.load("", data)
	if err != nil {
		return nil, "", err
	}
	return l.rs.domains[domain], domain, nil
}

// loader loads domain files one by one into one set of rules.
type loader struct {
	cfg   Config
	sizes []time.Duration
	rs    *rules
	from  map[string]string // domain → the file that defined it first
	// seen holds the composite keys ("key_value") of each node's children,
	// by which upstream tells duplicates (across the files of a merged
	// domain too).
	seen map[*rulesNode]map[string]seenAt
	// The file being loaded, and the line of each of its fields.
	file   string
	lines  map[string]int
	values map[string]string // a scalar field's value
	// checked are the mappings checked already.
	checked map[*yaml.Node]bool
}

// seenAt is where a descriptor was defined.
type seenAt struct{ file, field, key, value string }

func newLoader(cfg Config, sizes []time.Duration) *loader {
	return &loader{cfg: cfg, sizes: sizes, rs: &rules{domains: map[string]*rulesNode{}}, from: map[string]string{},
		seen: map[*rulesNode]map[string]seenAt{}}
}

// fail is an error at field of the file being loaded.
func (l *loader) fail(field, format string, args ...any) *RulesError {
	return &RulesError{File: l.file, Line: l.lineOf(field), Field: field, Reason: fmt.Sprintf(format, args...)}
}

// lineOf is the line of field, or of the closest field holding it, or
// the file's first.
func (l *loader) lineOf(field string) int {
	for {
		if line, ok := l.lines[field]; ok {
			return line
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			return l.lines[""]
		}
		field = field[:i]
	}
}

// load adds one file's domain and returns its name.
func (l *loader) load(file string, data []byte) (string, error) {
	l.file, l.lines, l.values, l.checked = file, map[string]int{}, map[string]string{}, map[*yaml.Node]bool{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", l.decodeError(err)
	}
	if len(doc.Content) == 0 {
		return "", &RulesError{File: file, Reason: "empty file"}
	}
	top := doc.Content[0]
	l.lines[""] = top.Line
	if err := l.checkFields(top, "", atRoot); err != nil {
		return "", err
	}
	var f domainFile
	if err := top.Decode(&f); err != nil {
		return "", l.decodeError(err)
	}
	if f.Domain == "" {
		return "", l.fail("domain", "is required")
	}
	root, ok := l.rs.domains[f.Domain]
	if ok && !l.cfg.MergeDomainConfig {
		return "", l.fail("domain", "domain %q is also defined in %s (envoy.merge_domain_config merges the files of a domain)", f.Domain, l.from[f.Domain])
	}
	if !ok {
		root = &rulesNode{}
		l.rs.domains[f.Domain] = root
		l.from[f.Domain] = file
	}
	return f.Domain, l.add(root, f.Domain, "descriptors", f.Descriptors, nil)
}

// decodeLine is the line a YAML decoder's message begins with.
var decodeLine = regexp.MustCompile(`^line (\d+): `)

// decodeError is the YAML decoder's err, placed at its first message's
// line and the field there.
func (l *loader) decodeError(err error) *RulesError {
	re := &RulesError{File: l.file, Reason: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	if te, ok := errors.AsType[*yaml.TypeError](err); ok && len(te.Errors) > 0 {
		re.Reason = te.Errors[0]
	}
	if m := decodeLine.FindStringSubmatch(re.Reason); m != nil {
		re.Line, _ = strconv.Atoi(m[1])
		re.Reason = re.Reason[len(m[0]):]
		re.Field = l.fieldOn(re.Line, re.Reason)
	}
	return re
}

// fieldOn is the field a decoder's message msg about line is about: the
// one field there, or the one whose value msg quotes, or the mapping
// holding them all (a flow mapping on one line).
func (l *loader) fieldOn(line int, msg string) string {
	var on []string
	for f, fl := range l.lines {
		if fl == line && f != "" {
			on = append(on, f)
		}
	}
	if len(on) == 0 {
		return ""
	}
	sort.Strings(on)
	for _, f := range on {
		if v, ok := l.values[f]; ok && strings.Contains(msg, "`"+v+"`") {
			return f
		}
	}
	common := on[0]
	for _, f := range on[1:] {
		for !(f == common || strings.HasPrefix(f, common+".") || strings.HasPrefix(f, common+"[")) {
			i := strings.LastIndexAny(common, ".[")
			if i < 0 {
				return ""
			}
			common = common[:i]
		}
	}
	return common
}

// checkFields checks a mapping's keys and values as upstream's loader
// does, before decoding: every key a string and a field of domain files
// (out of place: a warning), every list one of mappings, no float and no
// integer beyond 64 bits (metadata aside); and unlike upstream, no key
// twice in one mapping. It records each field's line. here is where the
// mapping is (0: out of place).
func (l *loader) checkFields(n *yaml.Node, path string, here place) error {
	n = deref(n)
	if n.Kind != yaml.MappingNode || l.checked[n] { // an alias's mapping is checked once: no loop, no blow-up
		return nil
	}
	l.checked[n] = true
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" { // "<<: *anchor": its fields are this mapping's
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				if err := l.checkFields(m, path, here); err != nil {
					return err
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return &RulesError{File: l.file, Line: k.Line, Field: path, Reason: fmt.Sprintf("key %s is not a string", k.Value)}
		}
		name := k.Value
		field := name
		if path != "" {
			field = path + "." + name
		}
		if line, dup := first[name]; dup {
			return &RulesError{File: l.file, Line: k.Line, Field: field, Reason: fmt.Sprintf("given twice (first on line %d)", line)}
		}
		first[name] = k.Line
		l.lines[field] = k.Line
		pl, known := fields[name]
		if !known {
			return &RulesError{File: l.file, Line: k.Line, Field: field, Reason: "unknown field"}
		}
		if here != 0 && here&pl == 0 {
			l.rs.warnings = append(l.rs.warnings, fmt.Sprintf("%s:%d: %s: has no effect here, and is ignored", l.file, k.Line, field))
		}
		if name == "metadata" { // free-form
			continue
		}
		var inner place
		if here&pl != 0 {
			inner = map[string]place{"descriptors": atDescriptor, "rate_limit": atRateLimit, "replaces": atReplace}[name]
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for j, e := range v.Content {
				at := fmt.Sprintf("%s[%d]", field, j)
				e = deref(e)
				l.lines[at] = e.Line
				if e.Kind != yaml.MappingNode {
					return &RulesError{File: l.file, Line: e.Line, Field: at, Reason: "must be a mapping: lists in domain files hold mappings only"}
				}
				if err := l.checkFields(e, at, inner); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if err := l.checkFields(v, field, inner); err != nil {
				return err
			}
		case yaml.ScalarNode:
			l.values[field] = v.Value
			if reason := checkScalar(v); reason != "" {
				return &RulesError{File: l.file, Line: v.Line, Field: field, Reason: reason}
			}
			// A string is no boolean to upstream's decoder, not even a
			// quoted "yes" (YAML 1.1's true, unquoted).
			if here&pl != 0 && boolFields[name] && v.ShortTag() == "!!str" && v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.TaggedStyle) != 0 {
				return &RulesError{File: l.file, Line: v.Line, Field: field, Reason: fmt.Sprintf("must be true or false, got the string %q", v.Value)}
			}
		}
	}
	return nil
}

// checkScalar refuses what upstream's loader refuses of a value: a float
// and an integer beyond 64 bits.
func checkScalar(v *yaml.Node) string {
	switch v.ShortTag() {
	case "!!float":
		return fmt.Sprintf("%s is a float, which domain files do not take (quote it for a string)", v.Value)
	case "!!int":
		if _, err := strconv.ParseInt(strings.ReplaceAll(v.Value, "_", ""), 0, 64); err != nil {
			return fmt.Sprintf("%s does not fit in 64 bits", v.Value)
		}
	}
	return ""
}

// deref follows aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// add adds ds under parent, whose nodes from the domain down are chain;
// field is their place in the file.
func (l *loader) add(parent *rulesNode, domain, field string, ds []descriptorYAML, chain []*rulesNode) error {
	for i, d := range ds {
		at := fmt.Sprintf("%s[%d]", field, i)
		if d.Key == "" {
			return l.fail(at+".key", "is required")
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		n := &rulesNode{key: d.Key, value: d.Value, share: d.ShareThreshold, toMetric: d.ValueToMetric, path: composite}
		if parent.path != "" {
			n.path = parent.path + "." + composite
		}
		seen := l.seen[parent]
		if seen == nil {
			seen = map[string]seenAt{}
			l.seen[parent] = seen
		}
		if prev, dup := seen[composite]; dup {
			where := prev.field
			if prev.file != l.file {
				where = prev.file + ": " + prev.field
			}
			if prev.key == d.Key && prev.value == d.Value {
				return l.fail(at, "duplicate descriptor %q (first at %s)", n.path, where)
			}
			return l.fail(at, "key %q and value %q make the composite key %q of key %q and value %q at %s: envoyproxy/ratelimit takes them for duplicates",
				d.Key, d.Value, composite, prev.key, prev.value, where)
		}
		seen[composite] = seenAt{l.file, at, d.Key, d.Value}
		switch {
		case strings.Contains(d.Value, "*"):
			n.by, n.parts = byWildcard, strings.Split(d.Value, "*")
		case d.Value == "":
			n.by = byKey
		}
		if d.ShareThreshold && n.by != byWildcard {
			return l.fail(at+".share_threshold", "is only for a wildcard value (one with *), and value is %q", d.Value)
		}
		levels := append(slices.Clip(chain), n)
		if d.RateLimit != nil {
			r, err := l.newRule(domain, at+".rate_limit", n, d, levels)
			if err != nil {
				return err
			}
			n.limit = r
		}
		if err := l.add(n, domain, at+".descriptors", d.Descriptors, levels); err != nil {
			return err
		}
		if n.by == byWildcard {
			parent.wildcards = append(parent.wildcards, n)
			continue
		}
		if parent.children == nil {
			parent.children = map[entry]*rulesNode{}
		}
		parent.children[entry{n.key, n.value}] = n
	}
	return nil
}

// newRule checks a descriptor's rate_limit, at field.
func (l *loader) newRule(domain, field string, n *rulesNode, d descriptorYAML, levels []*rulesNode) (*rule, error) {
	rl := d.RateLimit
	r := &rule{domain: domain, path: n.path, name: rl.Name, shadow: d.ShadowMode, quota: d.QuotaMode,
		detailed: d.DetailedMetric, unlimited: rl.Unlimited, levels: levels}
	for _, lv := range levels {
		r.shared = r.shared || lv.share
		r.toMetric = r.toMetric || lv.toMetric
	}
	unit := strings.ToLower(rl.Unit)
	size, valid := units[unit]
	switch {
	case rl.Unlimited && valid:
		return nil, l.fail(field+".unit", "an unlimited rate_limit takes no unit")
	case !rl.Unlimited && !valid:
		return nil, l.fail(field+".unit", "must be %s, got %q", unitNames, rl.Unit)
	}
	for j, rep := range rl.Replaces {
		at := fmt.Sprintf("%s.replaces[%d].name", field, j)
		switch rep.Name {
		case "":
			return nil, l.fail(at, "is required")
		case rl.Name:
			return nil, l.fail(at, "names this rate_limit itself (%q), which cannot replace itself", rep.Name)
		}
		r.replaces = append(r.replaces, rep.Name)
	}
	if rl.Unlimited {
		return r, nil
	}
	if !slices.Contains(l.sizes, size) {
		have := make([]string, len(l.sizes))
		for i, s := range l.sizes {
			have[i] = service.FormatDuration(s)
		}
		sort.Strings(have)
		return nil, l.fail(field+".unit", "unit %s needs the window size %s in namespace %q, which has %s",
			unit, service.FormatDuration(size), l.cfg.Namespace, strings.Join(have, ", "))
	}
	r.unit, r.size, r.perUnit = unit, size, rl.RequestsPerUnit
	return r, nil
}

// valuePath is the metric path of a request descriptor's entries under r,
// as upstream names its stats: the configured path, but the request's
// value at a level with value_to_metric, and at every level under
// detailed_metric; a share_threshold level keeps its wildcard value.
func (r *rule) valuePath(entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		n := r.levels[i]
		b.WriteString(e.GetKey())
		switch v := e.GetValue(); {
		case n.share, n.by == byWildcard && !n.toMetric && !r.detailed:
			b.WriteByte('_')
			b.WriteString(n.value)
		case r.detailed, v != "" && (n.by == byValue || n.toMetric):
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
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

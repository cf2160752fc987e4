package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limiterd/limiterd/internal/config"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
)

// configFields returns the path of every field of the config file:
// yaml names joined by ".", "[]" after a list of mappings, "<name>" for
// the key of a map of mappings (stores.<name>.type). A store's own fields
// are those of the three store types, under stores.<name>.
func configFields() []string {
	var paths []string
	unmarshaler := reflect.TypeFor[yaml.Unmarshaler]()
	obsolete := reflect.TypeFor[interface{ UnmarshalYAML(func(any) error) error }]()
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			path := prefix + name
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft == reflect.TypeFor[config.StoreConfig]():
				paths = append(paths, path)
			case ft.Kind() == reflect.Map && ft.Elem() == reflect.TypeFor[config.StoreConfig]():
				paths = append(paths, path, path+".<name>.type")
				for _, st := range []reflect.Type{
					reflect.TypeFor[redisstore.Config](), reflect.TypeFor[pgstore.Config](), reflect.TypeFor[cassandrastore.Config](),
				} {
					walk(path+".<name>.", st)
				}
			case reflect.PointerTo(ft).Implements(unmarshaler), reflect.PointerTo(ft).Implements(obsolete):
				paths = append(paths, path)
			case ft.Kind() == reflect.Struct:
				paths = append(paths, path)
				walk(path+".", ft)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				paths = append(paths, path)
				walk(path+"[].", ft.Elem())
			default:
				paths = append(paths, path)
			}
		}
	}
	walk("", reflect.TypeFor[config.Config]())
	slices.Sort(paths)
	return slices.Compact(paths)
}

// fieldRow is a row of a field table on docs/configuration.md: its first
// cell holds one or more fields, each in backquotes.
var fieldRow = regexp.MustCompile("^\\| *(`[^|]*`) *\\|")

var fieldName = regexp.MustCompile("`([^`]+)`")

// docFields returns the fields that the field tables of
// docs/configuration.md name (tables whose header's first cell is
// "field"), with the line of each.
func docFields(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]int{}
	inTable := false
	for n, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| field |"):
			inTable = true
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable:
			m := fieldRow.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, f := range fieldName.FindAllStringSubmatch(m[1], -1) {
				fields[f[1]] = n + 1
			}
		}
	}
	return fields
}

// TestConfigurationPage checks that docs/configuration.md's field tables
// name every field of the config file and no field that does not exist.
func TestConfigurationPage(t *testing.T) {
	want := configFields()
	if len(want) < 50 {
		t.Fatalf("the config has %d fields by reflection; the walk misses some", len(want))
	}
	got := docFields(t)
	for _, f := range want {
		if _, ok := got[f]; !ok {
			t.Errorf("docs/configuration.md: no row for the field %s", f)
		}
	}
	for f, line := range got {
		if !slices.Contains(want, f) {
			t.Errorf("docs/configuration.md:%d: %s is not a field of the config file", line, f)
		}
	}
}

// yamlBlock is a ```yaml block of the documentation.
var yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// TestDocsConfigExamples checks that the config files the documentation
// shows are valid: docs/getting-started.yaml, and every ```yaml block of
// README.md and docs/ whose top level names namespaces or stores (the
// other blocks are parts of a file, Envoy's config or its domain files).
func TestDocsConfigExamples(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := config.Load(config.Source{Path: filepath.Join(root, "docs", "getting-started.yaml")}); err != nil {
		t.Errorf("docs/getting-started.yaml: %v", err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
			var top map[string]any
			if err := yaml.Unmarshal([]byte(m[1]), &top); err != nil {
				t.Errorf("%s: a yaml block that is not YAML: %v\n%s", page, err, m[1])
				continue
			}
			if top["namespaces"] == nil && top["stores"] == nil {
				continue
			}
			checked++
			if _, err := config.ParseConfig(page, []byte(m[1])); err != nil {
				t.Errorf("%s: an example config that limiterd refuses: %v\n%s", page, err, m[1])
			}
		}
	}
	if checked < 3 {
		t.Errorf("%d example configs checked; want the configuration, modes and estimator examples at least", checked)
	}
}

// TestOperationsAdminTranscript runs the admin API's transcript on
// docs/operations.md against the config the page names: the embedded
// default, with the admin listener on.
func TestOperationsAdminTranscript(t *testing.T) {
	const heading, start = "## Reload and namespaces at run time", "`go run ./cmd/limiterd --admin-addr 6060`"
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	at := strings.Index(text, "\n"+heading+"\n")
	if at < 0 || !strings.Contains(text[at:], start) {
		t.Fatalf("docs/operations.md: no %q starting limiterd with %s; update this test", heading, start)
	}
	_, rest, ok := strings.Cut(text[at:], "```console\n")
	if !ok {
		t.Fatalf("docs/operations.md: no console block after %q", heading)
	}
	body, _, _ := strings.Cut(rest, "```\n")

	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr}, nil)
	d.dial(t, grpcAddr)
	hosts := strings.NewReplacer("127.0.0.1:6060", adminAddr, "127.0.0.1:7071", httpAddr)
	var cmd, want string
	runs := 0
	check := func() {
		if cmd == "" {
			return
		}
		runs++
		got := curl(t, hosts.Replace(cmd))
		var w, g any
		if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil || !reflect.DeepEqual(w, g) {
			t.Errorf("$ %s\n%s\nwant (as on the page)\n%s", cmd, got, want)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			check()
			cmd, want = c, ""
			continue
		}
		want += line + "\n"
	}
	check()
	if runs < 5 {
		t.Errorf("%d commands run; want the page's six", runs)
	}
}

// curl runs a command line `curl -s [-X METHOD] [-d 'BODY'] URL` and
// returns the answer's body.
func curl(t *testing.T, line string) string {
	t.Helper()
	var words []string
	for i, part := range strings.Split(line, "'") { // single quotes only
		if i%2 == 1 {
			words = append(words, part)
		} else {
			words = append(words, strings.Fields(part)...)
		}
	}
	method, data, url := "", "", ""
	for i := 1; i < len(words); i++ {
		switch words[i] {
		case "-s":
		case "-X":
			i++
			method = words[i]
		case "-d":
			i++
			data = words[i]
		default:
			url = "http://" + words[i]
		}
	}
	if words[0] != "curl" || url == "" {
		t.Fatalf("not a curl command this test runs: %q", line)
	}
	if method == "" {
		method = http.MethodGet
		if data != "" {
			method = http.MethodPost
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// limitsTranscripts are the headings of docs/limits.md whose first block
// TestLimitsTranscripts runs, in order, on one limiterd.
var limitsTranscripts = []string{"## Policies", "## Dry runs (shadow mode)", "## Resets"}

// TestLimitsTranscripts runs the transcripts of docs/limits.md against
// one limiterd started with the config the policies section shows (its
// first ```yaml block), with the admin listener on. Answers are compared
// as JSON, the durations that depend on when a call is made
// (resetAfter, retryAfter) only for being there.
func TestLimitsTranscripts(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "limits.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	section := func(heading string) string {
		at := strings.Index(text, "\n"+heading+"\n")
		if at < 0 {
			t.Fatalf("docs/limits.md: no heading %q; update this test", heading)
		}
		return text[at:]
	}
	_, cfgRest, ok := strings.Cut(section(limitsTranscripts[0]), "```yaml\n")
	if !ok {
		t.Fatal("docs/limits.md: no yaml block after the policies heading")
	}
	cfg, _, _ := strings.Cut(cfgRest, "```\n")
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--config", file, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr}, nil)
	d.dial(t, grpcAddr)
	hosts := strings.NewReplacer("127.0.0.1:6060", adminAddr, "127.0.0.1:7071", httpAddr)
	// The rates shown are those of calls made within one minute: a
	// minute that ends meanwhile weighs the earlier hits less.
	if into := time.Since(time.Now().Truncate(time.Minute)); into > 55*time.Second {
		time.Sleep(time.Minute - into + 100*time.Millisecond)
	}
	runs := 0
	for _, heading := range limitsTranscripts {
		_, rest, ok := strings.Cut(section(heading), "```console\n")
		if !ok {
			t.Fatalf("docs/limits.md: no console block after %q", heading)
		}
		body, _, _ := strings.Cut(rest, "```\n")
		var cmd, want string
		check := func() {
			if cmd == "" {
				return
			}
			runs++
			got := curl(t, hosts.Replace(cmd))
			var w, g any
			if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil || !reflect.DeepEqual(timeless(w, g), timeless(g, g)) {
				t.Errorf("%s: $ %s\n%s\nwant (as on the page)\n%s", heading, cmd, got, want)
			}
		}
		for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			if c, ok := strings.CutPrefix(line, "$ "); ok {
				check()
				cmd, want = c, ""
				continue
			}
			want += line + "\n"
		}
		check()
	}
	if runs < 12 {
		t.Errorf("%d commands run; want the page's", runs)
	}
}

// timeless returns v with the values of its resetAfter and retryAfter
// fields replaced by "set" where they are durations and the same field
// of like (a value of the same shape) is one too, so that answers
// compare without the times that depend on when a call is made.
func timeless(v, like any) any {
	switch x := v.(type) {
	case map[string]any:
		l, _ := like.(map[string]any)
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "resetAfter" || k == "retryAfter" {
				if _, err := time.ParseDuration(fmt.Sprint(e)); err == nil {
					if _, err := time.ParseDuration(fmt.Sprint(l[k])); err == nil {
						out[k] = "set"
						continue
					}
				}
			}
			out[k] = timeless(e, l[k])
		}
		return out
	case []any:
		l, _ := like.([]any)
		out := make([]any, len(x))
		for i, e := range x {
			var le any
			if i < len(l) {
				le = l[i]
			}
			out[i] = timeless(e, le)
		}
		return out
	}
	return v
}

package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// markdownFiles returns every Markdown file of the repository, as paths
// from its root with forward slashes; directories whose name starts with
// "." are skipped.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") {
		t.Fatalf("no README.md among %q: the walk starts in the wrong place", files)
	}
	return files
}

// page is a Markdown file's text outside fenced code blocks, line by line
// (a line inside a block is ""), and its fences' info strings.
type page struct {
	lines  []string
	fences []fence
}

// fence is the opening line of a fenced code block.
type fence struct {
	line int    // 1-based
	info string // "console", "go", "" ...
}

func readPage(t *testing.T, file string) page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	var p page
	in := ""
	for i, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case in == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			in = trimmed[:3]
			p.fences = append(p.fences, fence{line: i + 1, info: strings.TrimSpace(trimmed[3:])})
			p.lines = append(p.lines, "")
		case in != "":
			if strings.HasPrefix(trimmed, in) && strings.TrimSpace(strings.TrimLeft(trimmed, in[:1])) == "" {
				in = ""
			}
			p.lines = append(p.lines, "")
		default:
			p.lines = append(p.lines, l)
		}
	}
	return p
}

var (
	heading  = regexp.MustCompile(`^ {0,3}#{1,6} +(.*?)(?: +#+)? *$`)
	htmlID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
)

// anchor is GitHub's anchor of a heading: lowercase, punctuation dropped
// (letters, digits, '-', '_' and spaces kept), spaces turned to '-'.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Modes (`sync_rate`, per namespace)", "modes-sync_rate-per-namespace"},
		{"HTTP/JSON", "httpjson"},
		{"TLS, tokens and certificates", "tls-tokens-and-certificates"},
		{"Envoy's rate-limit service", "envoys-rate-limit-service"},
		{"Buckets: token, leaky and fixed", "buckets-token-leaky-and-fixed"},
		{"Client time (`at`)", "client-time-at"},
	} {
		if got := anchor(c.in); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// anchors returns the anchors of a page: its headings' (a repeated one
// gets -1, -2, ... as on GitHub) and the ids of its HTML anchors.
func anchors(p page) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range p.lines {
		if m := heading.FindStringSubmatch(l); m != nil {
			text := strings.ReplaceAll(m[1], "`", "")
			a := anchor(text)
			if n := seen[a]; n > 0 {
				out[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				out[a] = true
			}
			seen[a]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// links returns the link targets of a page with their lines; code spans
// and fenced blocks hold none.
func links(p page) map[string][]int {
	out := map[string][]int{}
	for i, l := range p.lines {
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out[m[1]] = append(out[m[1]], i+1)
		}
		if m := refLink.FindStringSubmatch(l); m != nil {
			out[m[1]] = append(out[m[1]], i+1)
		}
	}
	return out
}

// TestMarkdownLinks checks every relative link of every Markdown file:
// the file or directory it names exists, and its #anchor, if any, is a
// heading (or an HTML anchor) of the Markdown file it names.
func TestMarkdownLinks(t *testing.T) {
	files := markdownFiles(t)
	pages := map[string]page{}
	for _, f := range files {
		pages[f] = readPage(t, f)
	}
	checked := 0
	for _, f := range files {
		for target, lines := range links(pages[f]) {
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, frag, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(f), file))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%d: %s leaves the repository", f, lines[0], target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s:%d: %s: no such file or directory", f, lines[0], target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			p, ok := pages[dest]
			if !ok {
				t.Errorf("%s:%d: %s: an anchor in a file that is not Markdown", f, lines[0], target)
				continue
			}
			if !anchors(p)[frag] {
				t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", f, lines[0], target, dest, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: the parser misses some", checked)
	}
}

// consoleRunners are the pages whose ```console blocks tests run
// (integration/docs_test.go, cmd/limiterd/docs_test.go): "all" when the test runs every block
// of the page in order, else the headings whose first block it runs.
var consoleRunners = map[string][]string{
	"README.md":               {"all"},                                                   // TestReadmeQuickStart
	"docs/getting-started.md": {"all"},                                                   // TestGettingStarted
	"docs/api.md":             {"## gRPC", "## HTTP/JSON"},                               // TestAPIGRPCTranscript, TestAPIHTTPTranscript
	"docs/redis-protocol.md":  {"all"},                                                   // TestRedisProtocolPage
	"docs/operations.md":      {"## Reload and namespaces at run time"},                  // cmd/limiterd's TestOperationsAdminTranscript
	"docs/limits.md":          {"## Policies", "## Dry runs (shadow mode)", "## Resets"}, // cmd/limiterd's TestLimitsTranscripts
}

// TestConsoleBlocksRun checks that ```console blocks, which promise a
// transcript that runs, appear only where a test runs them: anywhere on
// the pages whose every block runs, and on the others only as the first
// block after one of the headings their tests read. Illustrations use
// another info string (text, sh, json).
func TestConsoleBlocksRun(t *testing.T) {
	for _, f := range markdownFiles(t) {
		p := readPage(t, f)
		runners := consoleRunners[f]
		var consoles []int
		for _, fc := range p.fences {
			if fc.info == "console" {
				consoles = append(consoles, fc.line)
			}
		}
		if len(runners) > 0 && len(consoles) == 0 {
			t.Errorf("%s: no ```console block, but integration tests run its transcripts", f)
		}
		if slices.Equal(runners, []string{"all"}) {
			continue
		}
		// The first block after each heading of runners is run.
		run := map[int]bool{}
		for _, h := range runners {
			at := slices.Index(p.lines, h)
			if at < 0 {
				t.Errorf("%s: no heading %q, whose transcript a test runs", f, h)
				continue
			}
			for _, fc := range p.fences {
				if fc.line > at {
					run[fc.line] = fc.info == "console"
					break
				}
			}
		}
		for _, line := range consoles {
			if !run[line] {
				t.Errorf("%s:%d: a ```console block that no test runs: run it (integration/docs_test.go) or mark it text", f, line)
			}
		}
	}
}

//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

// The console transcripts of the pages: every ```console block of
// README.md and docs/ runs in one of these tests, against a limiterd
// started for it alone, its commands in order:
//
//   - README.md: TestReadmeQuickStart
//   - docs/getting-started.md: TestGettingStarted
//   - docs/api.md: TestAPIGRPCTranscript and TestAPIHTTPTranscript
//   - docs/redis-protocol.md: TestRedisProtocolPage
//
// Two pages' transcripts run in cmd/limiterd's tests, against a limiterd
// in process with its admin listener: docs/operations.md's
// (TestOperationsAdminTranscript) and docs/limits.md's
// (TestLimitsTranscripts).
//
// internal/docs checks that no other page has one.

// docStep is one command of a transcript and the answer printed after it.
type docStep struct {
	file   string // the page, from the repository's root
	line   int    // of the command in file
	cmd    string // after "$ "
	output string
}

// docBlocks returns the ```console blocks of file (a path from the
// repository's root), each as its commands with their outputs.
func docBlocks(t *testing.T, file string) [][]docStep {
	t.Helper()
	return consoleBlocks(t, file, docLines(t, file), 0)
}

// docSection returns the commands of the first ```console block after the
// line heading in file (a path from the repository's root), with their
// outputs.
func docSection(t *testing.T, file, heading string) []docStep {
	t.Helper()
	lines := docLines(t, file)
	for i, l := range lines {
		if l == heading {
			if blocks := consoleBlocks(t, file, lines[i:], i); len(blocks) > 0 {
				return blocks[0]
			}
			break
		}
	}
	t.Fatalf("%s: no complete ```console block after %q", file, heading)
	return nil
}

// docLines reads file (a path from the repository's root) as lines.
func docLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// consoleBlocks parses the ```console blocks of lines, the lines of file
// from line offset+1 on.
func consoleBlocks(t *testing.T, file string, lines []string, offset int) [][]docStep {
	t.Helper()
	var blocks [][]docStep
	var steps []docStep
	in := false
	for i, line := range lines {
		n := offset + i + 1
		switch {
		case !in:
			in = line == "```console"
		case line == "```":
			if len(steps) == 0 {
				t.Fatalf("%s:%d: no command in the block", file, n)
			}
			for i := range steps {
				steps[i].output = strings.TrimSpace(steps[i].output)
			}
			blocks = append(blocks, steps)
			steps, in = nil, false
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, docStep{file: file, line: n, cmd: strings.TrimPrefix(line, "$ ")})
		case len(steps) == 0:
			if strings.TrimSpace(line) != "" {
				t.Fatalf("%s:%d: output before any command", file, n)
			}
		default:
			steps[len(steps)-1].output += line + "\n"
		}
	}
	if in {
		t.Fatalf("%s: a ```console block is not closed", file)
	}
	return blocks
}

// TestReadmeQuickStart runs README.md's quick start against a limiterd
// started as README.md's first set-up command starts it: the embedded
// default config, with the Redis protocol on.
func TestReadmeQuickStart(t *testing.T) {
	const start = "go run ./cmd/limiterd --resp-addr 127.0.0.1:6380"
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "\n    "+start+"\n") {
		t.Fatalf("README.md does not start limiterd with %q: the quick start's server is started elsewhere; update this test", start)
	}
	resp := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	n := harness.StartLimiterd(t, "readme", "resp_addr: "+resp+"\n")
	blocks := docBlocks(t, "README.md")
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```console block")
	}
	runDocBlocks(t, docServer{http: n.HTTPAddr, resp: resp}, blocks)
}

// TestGettingStarted runs every transcript of docs/getting-started.md, in
// order, against one limiterd started with docs/getting-started.yaml (its
// listeners moved to free ports).
func TestGettingStarted(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "\ngo run ./cmd/limiterd --config docs/getting-started.yaml\n") {
		t.Fatal("docs/getting-started.md does not start limiterd with docs/getting-started.yaml; update this test")
	}
	cfg, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The page's addresses are the defaults; the harness passes the gRPC
	// and HTTP ones as flags, and the Redis protocol's is rewritten here.
	const pageRESP = "resp_addr: 127.0.0.1:6380"
	if !strings.Contains(string(cfg), pageRESP) {
		t.Fatalf("docs/getting-started.yaml has no %q: update this test", pageRESP)
	}
	resp := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	n := harness.StartLimiterd(t, "getting-started", strings.Replace(string(cfg), pageRESP, "resp_addr: "+resp, 1))
	blocks := docBlocks(t, "docs/getting-started.md")
	if len(blocks) < 10 {
		t.Fatalf("docs/getting-started.md has %d console blocks; want the tour's (10 at least)", len(blocks))
	}
	runDocBlocks(t, docServer{http: n.HTTPAddr, resp: resp}, blocks)
}

// TestRedisProtocolPage runs the transcripts of docs/redis-protocol.md
// against a limiterd on the embedded default config with the Redis
// protocol on, as the page starts it.
func TestRedisProtocolPage(t *testing.T) {
	const start = "go run ./cmd/limiterd --resp-addr 127.0.0.1:6380"
	page, err := os.ReadFile(filepath.Join("..", "docs", "redis-protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), start) {
		t.Fatalf("docs/redis-protocol.md does not start limiterd with %q; update this test", start)
	}
	resp := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	n := harness.StartLimiterd(t, "redis-protocol", "resp_addr: "+resp+"\n")
	blocks := docBlocks(t, "docs/redis-protocol.md")
	if len(blocks) == 0 {
		t.Fatal("docs/redis-protocol.md has no ```console block")
	}
	runDocBlocks(t, docServer{http: n.HTTPAddr, resp: resp}, blocks)
}

// docServer is where a transcript's 127.0.0.1:7071 (HTTP) and port 6380
// (the Redis protocol) really are.
type docServer struct{ http, resp string }

// runDocBlocks runs the curl and redis-cli commands of blocks in order and
// compares each answer with the one printed after it (see docJSONDiff and
// docRESPDiff). curl lines are POSTed from Go as curl would send them (see
// curlCall); redis-cli lines run the real redis-cli (Debian's redis-tools,
// which scripts/test.sh installs with redis-server), with --no-raw so that
// it prints as on a terminal.
func runDocBlocks(t *testing.T, srv docServer, blocks [][]docStep) {
	t.Helper()
	var cli string
	lastKey := ""
	for _, steps := range blocks {
		for _, st := range steps {
			words, err := shellWords(st.cmd, nil)
			if err != nil || len(words) == 0 {
				t.Fatalf("%s:%d: %q: %v", st.file, st.line, st.cmd, err)
			}
			var key string
			switch words[0] {
			case "curl":
				body, _, err := curlCall(st.cmd)
				if err != nil {
					t.Fatalf("%s:%d: %v", st.file, st.line, err)
				}
				var req struct{ Key string }
				json.Unmarshal([]byte(body), &req)
				key = req.Key
			case "redis-cli":
				args, ok := redisCLIArgs(words)
				if !ok || len(args) < 2 {
					t.Fatalf("%s:%d: not `redis-cli [-3] -p 6380 COMMAND KEY ...`: %q", st.file, st.line, words)
				}
				key = args[1]
				if cli == "" {
					cli = redisCLI(t)
				}
			default:
				t.Fatalf("%s:%d: a command this test does not run: %q (curl and redis-cli only)", st.file, st.line, st.cmd)
			}
			if key != lastKey {
				lastKey = key
				paceNewKey()
			}
			start := time.Now()
			if words[0] == "curl" {
				body, method, _ := curlCall(st.cmd)
				got := curlPost(t, st, "http://"+srv.http+"/"+method, body)
				end := time.Now()
				t.Logf("%s:%d: %s\n%s", st.file, st.line, st.cmd, got)
				var want, have any
				if err := json.Unmarshal([]byte(st.output), &want); err != nil {
					t.Fatalf("%s:%d: the answer shown is not JSON: %v\n%s", st.file, st.line, err, st.output)
				}
				if err := json.Unmarshal([]byte(got), &have); err != nil {
					t.Fatalf("%s:%d: the answer is not JSON: %v\n%s", st.file, st.line, err, got)
				}
				b := docBounds{longest: 2 * longestJSONDuration(body), start: start, end: end}
				for _, p := range docJSONDiff("", want, have, b) {
					t.Errorf("%s:%d: %s: %s", st.file, st.line, st.cmd, p)
				}
				continue
			}
			args, _ := redisCLIArgs(words)
			var flags []string
			if words[1] == "-3" {
				flags = []string{"-3"}
			}
			got := runRedisCLI(t, st, cli, srv.resp, append(flags, args...))
			end := time.Now()
			t.Logf("%s:%d: %s\n%s", st.file, st.line, st.cmd, got)
			b := docBounds{longest: 2 * longestArgMillis(args), start: start, end: end}
			for _, p := range docRESPDiff(st.output, got, b) {
				t.Errorf("%s:%d: %s: %s", st.file, st.line, st.cmd, p)
			}
		}
	}
}

// redisCLIArgs returns the command and its arguments of the line
// `redis-cli [-3] -p 6380 COMMAND ...` split in words; ok is false for
// another form.
func redisCLIArgs(words []string) (args []string, ok bool) {
	if len(words) > 1 && words[1] == "-3" {
		words = append(words[:1:1], words[2:]...)
	}
	if len(words) < 4 || words[0] != "redis-cli" || words[1] != "-p" || words[2] != "6380" {
		return nil, false
	}
	return words[3:], true
}

// paceNewKey is called before the first call on a key: the calls on one
// key go back to back within one second and one minute, so that they fall
// in the same 1 s and 60 s windows (and fixed periods) as on the page. It
// waits out the last 3 s of a minute and the second half of a second.
func paceNewKey() {
	now := time.Now()
	if now.Second() >= 57 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 5*time.Millisecond).Sub(now))
		now = time.Now()
	}
	if frac := now.Nanosecond(); frac > 500e6 {
		time.Sleep(time.Duration(1e9-frac) + 5*time.Millisecond)
	}
}

// redisCLI finds redis-cli: under CI=true a missing one fails the test,
// else it skips it.
func redisCLI(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-cli not found (Debian package redis-tools): %v", err)
		}
		t.Skipf("redis-cli not found (Debian package redis-tools)")
	}
	return p
}

// runRedisCLI runs redis-cli with args against addr and returns what it
// prints.
func runRedisCLI(t *testing.T, st docStep, bin, addr string, args []string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--no-raw", "-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s:%d: %s: %v\n%s", st.file, st.line, st.cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// docBounds are the ranges of the fields that depend on when a call is
// made: a duration lies in (0, longest], a time in [start, end + longest].
// longest is twice the longest duration the call names: a sliding
// window's retry is at most two window sizes away.
type docBounds struct {
	longest    time.Duration
	start, end time.Time
}

func (b docBounds) duration(d time.Duration) bool { return d > 0 && d <= b.longest }

func (b docBounds) time(at time.Time) bool {
	return !at.Before(b.start.Truncate(time.Millisecond)) && !at.After(b.end.Add(b.longest))
}

// longestJSONDuration is the longest duration ("60s", "10s") in a JSON
// request.
func longestJSONDuration(body string) time.Duration {
	var longest time.Duration
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case string:
			if d, err := time.ParseDuration(v); err == nil && strings.HasSuffix(v, "s") {
				longest = max(longest, d)
			}
		}
	}
	var v any
	json.Unmarshal([]byte(body), &v)
	walk(v)
	return longest
}

// longestArgMillis is the largest number among the arguments of an RL.*
// command, read as milliseconds, as every RL.* duration but Smyte's
// RL.REDUCE and RL.GET (whose answers hold none) is.
func longestArgMillis(args []string) time.Duration {
	var longest int64
	for _, a := range args {
		if n, err := strconv.ParseInt(a, 10, 64); err == nil {
			longest = max(longest, n)
		}
	}
	return time.Duration(longest) * time.Millisecond
}

// docJSONDiff compares an HTTP/JSON answer shown on a page (want) with the
// one received (got): the same fields, numbers within 1e-9, strings and
// booleans equal, except the fields that depend on when the call is made:
// resetAfter and retryAfter are durations within b on both sides,
// expiresAt a time within b, and a lease an id when the page shows one.
func docJSONDiff(path string, want, got any, b docBounds) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %v, want an object", path, got)}
		}
		var problems []string
		names := map[string]bool{}
		for k := range w {
			names[k] = true
		}
		for k := range g {
			names[k] = true
		}
		keys := make([]string, 0, len(names))
		for k := range names {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, inW := w[k]
			gv, inG := g[k]
			p := path + "." + k
			switch {
			case !inW:
				problems = append(problems, fmt.Sprintf("%s: got %v, which the page does not show", p, gv))
			case !inG:
				problems = append(problems, fmt.Sprintf("%s: missing, want %v", p, wv))
			case k == "resetAfter" || k == "retryAfter":
				for _, v := range []struct {
					who string
					val any
				}{{"page", wv}, {"got", gv}} {
					if !b.duration(jsonDuration(v.val)) {
						problems = append(problems, fmt.Sprintf("%s: %s %v, want a duration in (0, %v]", p, v.who, v.val, b.longest))
					}
				}
			case k == "expiresAt":
				gs, _ := gv.(string)
				at, err := time.Parse(time.RFC3339Nano, gs)
				if err != nil || !b.time(at) {
					problems = append(problems, fmt.Sprintf("%s: got %v, want a time in [%v, %v]", p, gv, b.start.UTC(), b.end.Add(b.longest).UTC()))
				}
			case k == "lease":
				ws, _ := wv.(string)
				gs, _ := gv.(string)
				if (ws == "") != (gs == "") {
					problems = append(problems, fmt.Sprintf("%s: got %q, want %s", p, gs, map[bool]string{true: "none", false: "a lease id"}[ws == ""]))
				}
			default:
				problems = append(problems, docJSONDiff(p, wv, gv, b)...)
			}
		}
		return problems
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: got %v, want %v", path, got, want)}
		}
		var problems []string
		for i := range w {
			problems = append(problems, docJSONDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], b)...)
		}
		return problems
	case float64:
		if g, ok := got.(float64); !ok || math.Abs(g-w) > 1e-9 {
			return []string{fmt.Sprintf("%s: got %v, want %v", path, got, want)}
		}
		return nil
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: got %v, want %v", path, got, want)}
		}
		return nil
	}
}

// respItem is the index of one line of redis-cli's answer: "12) " in
// "12) (integer) 57269", whose item is "(integer) 57269".
var respItem = regexp.MustCompile(`^\s*\d+\) `)

// docRESPDiff compares redis-cli's answer shown on a page (want) with the
// one received (got), line by line, except the values that depend on when
// the call is made: the value of "reset_after_ms" or "retry_after_ms" is
// 0 on both sides or milliseconds within b on both, that of
// "expires_at_ms" 0 on both sides or a Unix time in milliseconds within
// b, and that of "lease" an id on both sides or (nil) on both. A value
// follows its name on the next line (RESP2: a flat array) or on the same
// line after " => " (RESP3: a map).
func docRESPDiff(want, got string, b docBounds) []string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	if len(wl) != len(gl) {
		return []string{fmt.Sprintf("got %d lines, want %d:\n%s", len(gl), len(wl), got)}
	}
	var problems []string
	prev := ""
	for i := range wl {
		if wk, wv, ok := strings.Cut(wl[i], " => "); ok {
			gk, gv, _ := strings.Cut(gl[i], " => ")
			if gk != wk {
				problems = append(problems, fmt.Sprintf("line %d: got %q, want %q", i+1, gl[i], wl[i]))
				continue
			}
			_, name, _ := strings.Cut(wk, "# ")
			if p := respValueDiff(name, wv, gv, b); p != "" {
				problems = append(problems, fmt.Sprintf("line %d: %s", i+1, p))
			}
			continue
		}
		w, g := respItem.ReplaceAllString(wl[i], ""), respItem.ReplaceAllString(gl[i], "")
		if respItem.FindString(wl[i]) != respItem.FindString(gl[i]) {
			problems = append(problems, fmt.Sprintf("line %d: got %q, want %q", i+1, gl[i], wl[i]))
		} else if p := respValueDiff(prev, w, g, b); p != "" {
			problems = append(problems, fmt.Sprintf("line %d: %s", i+1, p))
		}
		prev = g
	}
	return problems
}

// respValueDiff compares the value want shown for the name (the item
// before it, quoted as redis-cli prints it) with the one received, as
// docRESPDiff says; it returns "" when they agree.
func respValueDiff(name, want, got string, b docBounds) string {
	switch name {
	case `"reset_after_ms"`, `"retry_after_ms"`, `"expires_at_ms"`:
		wn, werr := strconv.ParseInt(strings.TrimPrefix(want, "(integer) "), 10, 64)
		gn, gerr := strconv.ParseInt(strings.TrimPrefix(got, "(integer) "), 10, 64)
		ok := werr == nil && gerr == nil && (wn == 0) == (gn == 0)
		if ok && gn != 0 {
			if name == `"expires_at_ms"` {
				ok = b.time(time.UnixMilli(gn))
			} else {
				ok = b.duration(time.Duration(wn)*time.Millisecond) && b.duration(time.Duration(gn)*time.Millisecond)
			}
		}
		if !ok {
			return fmt.Sprintf("%s %s, want %s within (0, %v]", name, got, want, b.longest)
		}
	case `"lease"`:
		if (want == "(nil)") != (got == "(nil)") || got != "(nil)" && !strings.HasPrefix(got, `"`) {
			return fmt.Sprintf("lease %s, want %s", got, want)
		}
	default:
		if want != got {
			return fmt.Sprintf("got %q, want %q", got, want)
		}
	}
	return ""
}

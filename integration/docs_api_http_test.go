//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestAPIHTTPTranscript runs the console transcript of docs/api.md's
// "HTTP/JSON" section (moved there from README.md), curl by curl, against a limiterd on the default
// config, and compares every answer with the one printed there as
// TestAPIGRPCTranscript does (numbers within 1e-9, resetAfter and
// retryAfter in (0, the window size]). Each answer of a call the gRPC
// transcript also makes, with the same body, must moreover be the gRPC
// answer printed there, once the fields at their default value (which
// grpcurl does not print) are left out.
func TestAPIHTTPTranscript(t *testing.T) {
	steps := docSection(t, "docs/api.md", "## HTTP/JSON")
	grpcAnswers := map[string][]string{} // method + " " + body: the answers, in order
	for _, st := range apiGRPCTranscript(t) {
		words, err := shellWords(st.cmd, map[string]string{"AT1": "", "AT2": "", "AT3": ""})
		if err != nil || len(words) < 6 || words[0] != "grpcurl" || words[2] != "-d" {
			continue
		}
		k := words[len(words)-1] + " " + words[3]
		grpcAnswers[k] = append(grpcAnswers[k], st.output)
	}
	n := harness.StartLimiterd(t, "api-http", "# the embedded default: namespace default, windows 1s and 60s, local only\n")
	compared := 0
	lastKey := ""
	for _, st := range steps {
		body, method, err := curlCall(st.cmd)
		if err != nil {
			t.Fatalf("%s:%d: %v", st.file, st.line, err)
		}
		// A new key waits for the first half of a second, so that its
		// calls fall in one 1 s window (see TestAPIGRPCTranscript).
		var req struct{ Key string }
		json.Unmarshal([]byte(body), &req)
		if req.Key != lastKey {
			lastKey = req.Key
			if frac := time.Now().Nanosecond(); frac > 500e6 {
				time.Sleep(time.Duration(1e9-frac) + 5*time.Millisecond)
			}
		}
		got := curlPost(t, st, "http://"+n.HTTPAddr+"/"+method, body)
		t.Logf("%s:%d: %s\n%s", st.file, st.line, st.cmd, got)
		var want, have any
		if err := json.Unmarshal([]byte(st.output), &want); err != nil {
			t.Fatalf("%s:%d: the answer is not JSON: %v\n%s", st.file, st.line, err, st.output)
		}
		if err := json.Unmarshal([]byte(got), &have); err != nil {
			t.Fatalf("%s:%d: the answer is not JSON: %v\n%s", st.file, st.line, err, got)
		}
		checkRetryAfter(t, st, want, have)
		for _, p := range jsonDiff("", want, have, nil) {
			t.Errorf("%s:%d: %s: %s", st.file, st.line, st.cmd, p)
		}
		if gs := grpcAnswers[method+" "+body]; len(gs) > 0 {
			g := gs[0]
			grpcAnswers[method+" "+body] = gs[1:]
			compared++
			if msg, ok := strings.CutPrefix(g, "ERROR:"); ok {
				_, msg, _ = strings.Cut(msg, "Message: ")
				if m, _ := have.(map[string]any); m["message"] != msg {
					t.Errorf("%s:%d: %s: message %v, want the gRPC transcript's %q", st.file, st.line, st.cmd, m["message"], msg)
				}
				continue
			}
			var grpcWant any
			if err := json.Unmarshal([]byte(g), &grpcWant); err != nil {
				t.Fatalf("docs/api.md: the gRPC answer to %s %s is not JSON: %v", method, body, err)
			}
			checkRetryAfter(t, st, grpcWant, have)
			for _, p := range jsonDiff("", grpcWant, withoutDefaults(have), nil) {
				t.Errorf("%s:%d: %s: against the gRPC transcript: %s", st.file, st.line, st.cmd, p)
			}
		}
	}
	if compared < 3 {
		t.Errorf("only %d calls of the HTTP transcript are in the gRPC one; want Increment, SlidingWindow and Allow at least", compared)
	}
}

// checkRetryAfter checks that the retryAfter of the answer got, when it
// has one, lies in (0, 2 × the largest window size of its limits] — the
// previous window's share drops out within a window size, the current
// window's within two — and replaces it with want's, for jsonDiff, which
// bounds it by one window size.
func checkRetryAfter(t *testing.T, st docStep, want, got any) {
	t.Helper()
	w, _ := want.(map[string]any)
	g, _ := got.(map[string]any)
	if g == nil || g["retryAfter"] == nil {
		return
	}
	var window time.Duration
	limits, _ := g["limits"].([]any)
	for _, l := range limits {
		if m, ok := l.(map[string]any); ok {
			window = max(window, jsonDuration(m["windowSize"]))
		}
	}
	if d := jsonDuration(g["retryAfter"]); d <= 0 || d > 2*window {
		t.Errorf("%s:%d: %s: retryAfter %v, want a duration in (0, %v]", st.file, st.line, st.cmd, g["retryAfter"], 2*window)
	}
	if w != nil && w["retryAfter"] != nil {
		g["retryAfter"] = w["retryAfter"]
	}
}

// curlCall reads the command line `curl -s -d BODY 127.0.0.1:7071/METHOD`
// (the default HTTP address).
func curlCall(line string) (body, method string, err error) {
	words, err := shellWords(line, nil)
	if err != nil {
		return "", "", err
	}
	if len(words) != 5 || words[0] != "curl" || words[1] != "-s" || words[2] != "-d" {
		return "", "", fmt.Errorf("not `curl -s -d BODY ADDR/METHOD`: %q", words)
	}
	addr, method, _ := strings.Cut(words[4], "/")
	if addr != "127.0.0.1:7071" {
		return "", "", fmt.Errorf("address %s, want the default 127.0.0.1:7071", addr)
	}
	return words[3], method, nil
}

// curlPost POSTs body to url as curl -d does and returns the answer.
func curlPost(t *testing.T, st docStep, url, body string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl -d's
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s:%d: %v", st.file, st.line, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s:%d: %v", st.file, st.line, err)
	}
	return string(b)
}

// withoutDefaults drops the fields at their default value (false, 0, "",
// an empty list or object), which protojson, and so grpcurl, leaves out.
func withoutDefaults(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			switch e := withoutDefaults(e).(type) {
			case bool:
				if e {
					out[k] = e
				}
			case float64:
				if e != 0 {
					out[k] = e
				}
			case string:
				if e != "" {
					out[k] = e
				}
			case []any:
				if len(e) > 0 {
					out[k] = e
				}
			case map[string]any:
				if len(e) > 0 {
					out[k] = e
				}
			default:
				out[k] = e
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = withoutDefaults(e)
		}
		return out
	}
	return v
}

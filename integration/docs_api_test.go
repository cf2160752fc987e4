//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	_ "google.golang.org/genproto/googleapis/rpc/errdetails" // resolves the BadRequest details of batch errors
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// The shell lines of docs/api.md that choose the times of its example, and
// what they do, in Go: apiWait waits until the clock is 30 to 34 s into
// a minute and sets M to that minute's start; apiTimes sets AT1, AT2
// and AT3 to M − 20 s, M + 5 s and M + 30 s. If the page changes these
// lines, change their Go twins below with them.
const (
	apiWait  = `until s=$(( $(date +%s) % 60 )); [ "$s" -ge 30 ] && [ "$s" -lt 35 ]; do sleep 1; done; M=$(( $(date +%s) / 60 * 60 ))`
	apiTimes = `AT1=$(date -u -d @$((M - 20)) +%FT%TZ); AT2=$(date -u -d @$((M + 5)) +%FT%TZ); AT3=$(date -u -d @$((M + 30)) +%FT%TZ)`
)

// apiMethods are the methods the transcript may call, with their
// request and response messages.
var apiMethods = map[string]func() (req, resp proto.Message){
	"limiter.v1.RateLimiter/Increment": func() (proto.Message, proto.Message) {
		return new(limiterv1.IncrementRequest), new(limiterv1.IncrementResponse)
	},
	"limiter.v1.RateLimiter/SlidingWindow": func() (proto.Message, proto.Message) {
		return new(limiterv1.SlidingWindowRequest), new(limiterv1.SlidingWindowResponse)
	},
	"limiter.v1.RateLimiter/Allow": func() (proto.Message, proto.Message) {
		return new(limiterv1.AllowRequest), new(limiterv1.AllowResponse)
	},
	"limiter.v1.RateLimiter/IncrementBatch": func() (proto.Message, proto.Message) {
		return new(limiterv1.IncrementBatchRequest), new(limiterv1.IncrementBatchResponse)
	},
	"limiter.v1.RateLimiter/AllowBatch": func() (proto.Message, proto.Message) {
		return new(limiterv1.AllowBatchRequest), new(limiterv1.AllowBatchResponse)
	},
	"grpc.health.v1.Health/Check": func() (proto.Message, proto.Message) {
		return new(healthpb.HealthCheckRequest), new(healthpb.HealthCheckResponse)
	},
}

// TestAPIGRPCTranscript runs the console transcript of docs/api.md's
// "gRPC" section (moved there from README.md) against a limiterd on the
// default config and compares every answer with the one printed there:
// JSON compared as JSON, numbers within 1e-9, and the durations
// resetAfter and retryAfter, which depend on when the call is made,
// checked to lie in (0, the window size].
func TestAPIGRPCTranscript(t *testing.T) {
	steps := apiGRPCTranscript(t)
	n := harness.StartLimiterd(t, "api-grpc", "# the embedded default: namespace default, windows 1s and 60s, local only\n")
	conn, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	vars := map[string]string{}
	var sawWait, sawTimes bool
	lastKey := ""
	for _, st := range steps {
		switch {
		case st.cmd == apiWait:
			m := apiMinute(t)
			vars["M"] = fmt.Sprint(m)
			sawWait = true
			continue
		case st.cmd == apiTimes:
			if !sawWait {
				t.Fatalf("%s:%d: the times come before the wait that sets M", st.file, st.line)
			}
			var m int64
			fmt.Sscan(vars["M"], &m)
			at := func(d int64) string { return time.Unix(m+d, 0).UTC().Format("2006-01-02T15:04:05Z") }
			vars["AT1"], vars["AT2"], vars["AT3"] = at(-20), at(5), at(30)
			sawTimes = true
			continue
		case !strings.HasPrefix(st.cmd, "grpcurl "):
			t.Fatalf("%s:%d: a command this test does not know: %q (update apiWait/apiTimes and their Go twins)", st.file, st.line, st.cmd)
		}
		words, err := shellWords(st.cmd, vars)
		if err != nil {
			t.Fatalf("%s:%d: %v", st.file, st.line, err)
		}
		data, target, method, err := grpcurlArgs(words)
		if err != nil {
			t.Fatalf("%s:%d: %v", st.file, st.line, err)
		}
		if target != "127.0.0.1:7070" {
			t.Errorf("%s:%d: address %s, want the default 127.0.0.1:7070", st.file, st.line, target)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if method == "list" {
			checkGRPCList(ctx, t, st, conn)
			cancel()
			continue
		}
		newMsgs, ok := apiMethods[method]
		if !ok {
			cancel()
			t.Fatalf("%s:%d: unknown method %s", st.file, st.line, method)
		}
		req, resp := newMsgs()
		if data != "" {
			if err := protojson.Unmarshal([]byte(data), req); err != nil {
				cancel()
				t.Fatalf("%s:%d: request %s: %v", st.file, st.line, data, err)
			}
		}
		// Calls on one key without `at` go back to back within one second,
		// so that their 1 s windows are the same: a new key waits for the
		// first half of a second.
		if key := keyOf(req); key != lastKey {
			lastKey = key
			if !strings.Contains(data, `"at"`) {
				if frac := time.Now().Nanosecond(); frac > 500e6 {
					time.Sleep(time.Duration(1e9-frac) + 5*time.Millisecond)
				}
			}
		}
		err = conn.Invoke(ctx, "/"+method, req, resp)
		cancel()
		got := ""
		if err == nil {
			b, merr := protojson.Marshal(resp)
			if merr != nil {
				t.Fatal(merr)
			}
			got = string(b)
		}
		t.Logf("%s:%d: %s\n%s", st.file, st.line, st.cmd, grpcurlAnswer(got, err))
		checkGRPCAnswer(t, st, got, err)
	}
	if !sawWait || !sawTimes {
		t.Errorf("the transcript has no line %q or %q: the seed example's times are chosen elsewhere; update this test", apiWait, apiTimes)
	}
}

// apiGRPCTranscript returns the commands of the ```console block of
// docs/api.md's "gRPC" section with their outputs.
func apiGRPCTranscript(t *testing.T) []docStep { return docSection(t, "docs/api.md", "## gRPC") }

// apiMinute does what apiWait does: it waits until the clock is 30
// to 34 s into a minute and returns that minute's start in Unix seconds.
func apiMinute(t *testing.T) int64 {
	t.Helper()
	for {
		now := time.Now().Unix()
		if s := now % 60; s >= 30 && s < 35 {
			return now / 60 * 60
		}
		time.Sleep(time.Second)
	}
}

// shellWords splits a command line as the shell would for the quoting the
// transcript uses: single quotes, double quotes, backslash outside quotes,
// and $NAME expanded from vars (an unknown name is an error).
func shellWords(line string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(i int) (int, error) { // line[i] == '$'
		j := i + 1
		for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= 'a' && line[j] <= 'z' || line[j] >= '0' && line[j] <= '9') {
			j++
		}
		name := line[i+1 : j]
		v, ok := vars[name]
		if name == "" || !ok {
			return 0, fmt.Errorf("$%s: not a variable the transcript sets", name)
		}
		cur.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated single quote")
			}
			cur.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return nil, fmt.Errorf("unterminated double quote")
				}
				if line[i] == '"' {
					i++
					break
				}
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("$`\"\\", line[i+1]) >= 0 {
					cur.WriteByte(line[i+1])
					i += 2
					continue
				}
				if line[i] == '$' {
					j, err := expand(i)
					if err != nil {
						return nil, err
					}
					i = j
					continue
				}
				cur.WriteByte(line[i])
				i++
			}
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			inWord = true
			i += 2
		case c == '$':
			j, err := expand(i)
			if err != nil {
				return nil, err
			}
			inWord = true
			i = j
		case strings.IndexByte("|&;<>()`", c) >= 0:
			return nil, fmt.Errorf("shell syntax %q this test does not run", c)
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// grpcurlArgs reads `grpcurl -plaintext [-d JSON] ADDR METHOD` (METHOD
// may be "list").
func grpcurlArgs(words []string) (data, target, method string, err error) {
	if len(words) < 4 || words[0] != "grpcurl" || words[1] != "-plaintext" {
		return "", "", "", fmt.Errorf("not `grpcurl -plaintext ...`: %q", words)
	}
	rest := words[2:]
	if rest[0] == "-d" {
		if len(rest) < 2 {
			return "", "", "", fmt.Errorf("-d without data")
		}
		data, rest = rest[1], rest[2:]
	}
	if len(rest) != 2 {
		return "", "", "", fmt.Errorf("want ADDR METHOD after the flags, got %q", rest)
	}
	return data, rest[0], rest[1], nil
}

// keyOf returns the key of a single-key request, or "".
func keyOf(m proto.Message) string {
	if k, ok := m.(interface{ GetKey() string }); ok {
		return k.GetKey()
	}
	return ""
}

// grpcurlAnswer is what grpcurl would print (indentation aside).
func grpcurlAnswer(got string, err error) string {
	if err != nil {
		s := status.Convert(err)
		return fmt.Sprintf("ERROR:\n  Code: %s\n  Message: %s", s.Code(), s.Message())
	}
	var v any
	if json.Unmarshal([]byte(got), &v) != nil {
		return got
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func checkGRPCList(ctx context.Context, t *testing.T, st docStep, conn *grpc.ClientConn) {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("%s:%d: reflection: %v", st.file, st.line, err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("%s:%d: reflection: %v", st.file, st.line, err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatalf("%s:%d: reflection: %v", st.file, st.line, err)
	}
	stream.CloseSend()
	var got []string
	for _, s := range r.GetListServicesResponse().GetService() {
		got = append(got, s.GetName())
	}
	sort.Strings(got)
	want := strings.Split(st.output, "\n")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:%d: %s\ngot  %q\nwant %q", st.file, st.line, st.cmd, got, want)
	}
}

func checkGRPCAnswer(t *testing.T, st docStep, got string, err error) {
	t.Helper()
	if strings.HasPrefix(st.output, "ERROR:") {
		if err == nil {
			t.Errorf("%s:%d: %s\ngot %s\nwant %s", st.file, st.line, st.cmd, got, st.output)
			return
		}
		if g := grpcurlAnswer("", err); g != st.output {
			t.Errorf("%s:%d: %s\ngot\n%s\nwant\n%s", st.file, st.line, st.cmd, g, st.output)
		}
		return
	}
	if err != nil {
		t.Errorf("%s:%d: %s: %v, want\n%s", st.file, st.line, st.cmd, err, st.output)
		return
	}
	var want, have any
	if err := json.Unmarshal([]byte(st.output), &want); err != nil {
		t.Fatalf("%s:%d: the answer is not JSON: %v\n%s", st.file, st.line, err, st.output)
	}
	if err := json.Unmarshal([]byte(got), &have); err != nil {
		t.Fatal(err)
	}
	for _, p := range jsonDiff("", want, have, nil) {
		t.Errorf("%s:%d: %s: %s", st.file, st.line, st.cmd, p)
	}
}

// jsonDiff compares an answer printed in a page (want) with the one
// received (got). parent is the object holding want, for the window size a
// duration is bounded by.
func jsonDiff(path string, want, got any, parent map[string]any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %v, want an object", path, got)}
		}
		var problems []string
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			wv, inW := w[k]
			gv, inG := g[k]
			p := path + "." + k
			switch {
			case !inW:
				problems = append(problems, fmt.Sprintf("%s: got %v, which the page does not show", p, gv))
			case !inG:
				problems = append(problems, fmt.Sprintf("%s: missing, want %v", p, wv))
			case k == "resetAfter" || k == "retryAfter":
				problems = append(problems, durationDiff(p, k, wv, gv, w)...)
			default:
				problems = append(problems, jsonDiff(p, wv, gv, w)...)
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
			problems = append(problems, jsonDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], parent)...)
		}
		return problems
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-w) > 1e-9 {
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

// durationDiff checks that both the page's and the received duration
// lie in (0, window]: for resetAfter the window size of its limit, for
// retryAfter the largest window size of the response's limits.
func durationDiff(path, name string, want, got any, obj map[string]any) []string {
	var window time.Duration
	if name == "resetAfter" {
		window = jsonDuration(obj["windowSize"])
	} else if limits, ok := obj["limits"].([]any); ok {
		for _, l := range limits {
			if m, ok := l.(map[string]any); ok {
				window = max(window, jsonDuration(m["windowSize"]))
			}
		}
	}
	if window <= 0 {
		return []string{fmt.Sprintf("%s: no window size to bound it by", path)}
	}
	var problems []string
	for _, v := range []struct {
		who string
		val any
	}{{"page", want}, {"got", got}} {
		if d := jsonDuration(v.val); d <= 0 || d > window {
			problems = append(problems, fmt.Sprintf("%s: %s %v, want a duration in (0, %v]", path, v.who, v.val, window))
		}
	}
	return problems
}

// jsonDuration parses a protojson Duration ("27.288512850s"), or returns 0.
func jsonDuration(v any) time.Duration {
	s, _ := v.(string)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

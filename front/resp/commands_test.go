package resp

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSmyteTranscript: the blog's transcript, RL.REDUCE TwoPerMin 2 60
// three times, answers 2, 1, 0; a minute later the bucket is full again.
func TestSmyteTranscript(t *testing.T) {
	clock := newClock()
	s := newTestServer(t, newService(t, clock), Config{})
	sess := &session{}
	for i, want := range []string{":2\r\n", ":1\r\n", ":0\r\n"} {
		if got := s.do(sess, "RL.REDUCE TwoPerMin 2 60"); got != want {
			t.Errorf("call %d = %q; want %q", i+1, got, want)
		}
	}
	clock.Add(time.Minute)
	if got := s.do(sess, "rl.reduce TwoPerMin 2 60"); got != ":2\r\n" {
		t.Errorf("a minute later = %q; want :2", got)
	}
}

// TestSmyteHandlerTest replays smyte/ratelimit's GetReduceCommands test
// (RateLimitHandlerTest.cpp), its client times moved to now: limiterd
// takes AT within a year of its clock.
func TestSmyteHandlerTest(t *testing.T) {
	clock := newClock()
	s := newTestServer(t, newService(t, clock), Config{})
	sess := &session{}
	base := minute.Unix()
	for i, c := range []struct {
		line string
		want int
	}{
		{"rl.reduce a 10 5 refill 3 at %d", 10},
		{"rl.preduce a 10 5000 at %d000 refill 3", 9},
		{"rl.get a 10 5 at %d refill 3", 8},
		{"rl.pget a 10 5000 refill 3 at %d000", 8},
		{"rl.reduce a 10 5 at %d refill 3 take 5", 8},
		{"rl.preduce a 10 5000 refill 3 take 5 at %d000", 3},
		{"rl.get a 10 5 at %d refill 3", 0},
		{"rl.get a 10 5 at %d refill 3", 3},
		{"rl.reduce a 10 5 at %d take 2 refill 3", 3},
		{"rl.preduce a 10 5000 at %d000 refill 3", 1},
		{"rl.preduce a 10 5000 at %d000 refill 3", 0},
		{"rl.get a 10 5 at %d refill 3", 3},
		{"rl.reduce a 10 5 at %d refill 3 take 4 strict", 3},
		{"rl.reduce a 10 5 at %d refill 3 take 4 strict", 0},
		{"rl.reduce a 10 5 at %d refill 3 take 1 strict", 0},
		{"rl.reduce a 10 5 at %d refill 3 take 2 strict", 3},
	} {
		// Smyte's times, in seconds: 2 2 2 2 2 2 2 8 8 8 9 13 14 16 18 23.
		at := []int64{2, 2, 2, 2, 2, 2, 2, 8, 8, 8, 9, 13, 14, 16, 18, 23}[i]
		line := fmt.Sprintf(c.line, base-100+at)
		if got, want := s.do(sess, line), fmt.Sprintf(":%d\r\n", c.want); got != want {
			t.Errorf("%s = %q; want %q", line, got, want)
		}
	}
}

// TestSmyteErrors: Smyte's parse errors (ParseRateLimitArgsWithErrors),
// each naming its argument.
func TestSmyteErrors(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	for _, c := range []struct{ line, want string }{
		{"rl.get abc 10 abc", "-ERR refilltime: value is not an integer or out of range\r\n"},
		{"rl.pget abc 0 60", "-ERR max: value is not an integer or out of range\r\n"},
		{"rl.reduce abc 10 60 refill strict 1", "-ERR refill: value is not an integer or out of range\r\n"},
		{"rl.pget abc 1 60 take 2", "-ERR syntax error: TAKE is not an option of RL.PGET, which takes no tokens\r\n"},
		{"rl.reduce abc 10 60 refill", "-ERR syntax error: REFILL needs a value\r\n"},
		{"rl.preduce abc 10 60 refill 1 strict abc", "-ERR syntax error: unknown option abc\r\n"},
		{"rl.reduce abc 10 60 take -1", "-ERR take: value is not an integer or out of range\r\n"},
		{"rl.reduce abc 10 60 at -1", "-ERR at: value is not an integer or out of range\r\n"},
		{"rl.reduce abc 10", "-ERR wrong number of arguments for 'rl.reduce' command\r\n"},
		{"rl.reduce abc 10 60 NS nope", "-NOTFOUND NS: namespace \"nope\" is not configured\r\n"},
	} {
		if got := s.do(sess, c.line); got != c.want {
			t.Errorf("%s = %q; want %q", c.line, got, c.want)
		}
	}
	// A range only the service knows: named as the command names it.
	if got := s.do(sess, "rl.reduce abc 10 99999999999"); !strings.HasPrefix(got, "-ERR refilltime: ") {
		t.Errorf("refilltime too long = %q; want an error on refilltime", got)
	}
}

// TestReplies: every kind of command, RESP2 and RESP3 encodings.
func TestReplies(t *testing.T) {
	cases := []struct {
		line         string
		resp2, resp3 string
	}{
		{"PING", "+PONG\r\n", "+PONG\r\n"},
		{"ping hi", "$2\r\nhi\r\n", "$2\r\nhi\r\n"},
		{"ECHO x", "$1\r\nx\r\n", "$1\r\nx\r\n"},
		{"RL.INCR k", "*4\r\n$2\r\n1s\r\n$1\r\n1\r\n$3\r\n60s\r\n$1\r\n1\r\n", "%2\r\n$2\r\n1s\r\n,1\r\n$3\r\n60s\r\n,1\r\n"},
		{"RL.INCR k BY 0.5 WINDOW 1000", "*2\r\n$2\r\n1s\r\n$3\r\n1.5\r\n", "%1\r\n$2\r\n1s\r\n,1.5\r\n"},
		{"RL.RATE k WINDOW 100 NS api", "*2\r\n$5\r\n100ms\r\n$1\r\n0\r\n", "%1\r\n$5\r\n100ms\r\n,0\r\n"},
		{"RL.ALLOW q 1000 1", "*12\r\n$7\r\nallowed\r\n:1\r\n$5\r\nnever\r\n:0\r\n$5\r\nlimit\r\n$1\r\n1\r\n$9\r\nremaining\r\n$1\r\n0\r\n$14\r\nretry_after_ms\r\n:0\r\n$14\r\nreset_after_ms\r\n:1000\r\n",
			"%6\r\n$7\r\nallowed\r\n#t\r\n$5\r\nnever\r\n#f\r\n$5\r\nlimit\r\n,1\r\n$9\r\nremaining\r\n,0\r\n$14\r\nretry_after_ms\r\n:0\r\n$14\r\nreset_after_ms\r\n:1000\r\n"},
		{"SELECT 0", "+OK\r\n", "+OK\r\n"},
		{"CLIENT GETNAME", "$-1\r\n", "_\r\n"},
		{"COMMAND COUNT", ":29\r\n", ":29\r\n"},
	}
	// The same calls in each protocol, each on a new node.
	for _, resp3 := range []bool{false, true} {
		s := newTestServer(t, newService(t, newClock()), Config{})
		for _, c := range cases {
			want := c.resp2
			if resp3 {
				want = c.resp3
			}
			if got := s.do(&session{resp3: resp3}, c.line); got != want {
				t.Errorf("%s (RESP3 %v) = %q; want %q", c.line, resp3, got, want)
			}
		}
	}
}

// TestConnectionCommands: HELLO switches the protocol, CLIENT keeps a
// name, AUTH and SELECT 1 are refused clearly, QUIT closes.
func TestConnectionCommands(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{id: 7}
	if got := s.do(sess, "HELLO 3 SETNAME app"); !strings.HasPrefix(got, "%7\r\n$6\r\nserver\r\n$8\r\nlimiterd\r\n") || !strings.Contains(got, "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n") {
		t.Errorf("HELLO 3 = %q", got)
	}
	if !sess.resp3 || sess.name != "app" {
		t.Errorf("after HELLO 3 SETNAME app: resp3 %v, name %q", sess.resp3, sess.name)
	}
	for _, c := range []struct{ line, want string }{
		{"CLIENT GETNAME", "$3\r\napp\r\n"},
		{"CLIENT SETNAME other", "+OK\r\n"},
		{"CLIENT GETNAME", "$5\r\nother\r\n"},
		{"CLIENT SETINFO LIB-NAME go-redis", "+OK\r\n"},
		{"CLIENT SETINFO lib-ver 9.17.3", "+OK\r\n"},
		{"CLIENT ID", ":7\r\n"},
		{"HELLO 4", "-NOPROTO unsupported protocol version; limiterd speaks RESP2 and RESP3 (HELLO 2 or HELLO 3)\r\n"},
		{"HELLO 3 AUTH default secret", "-" + errNoAuth + "\r\n"},
		{"AUTH secret", "-" + errNoAuth + "\r\n"},
		{"SELECT 1", "-ERR DB index is out of range: limiterd has one database, 0; a namespace is the NS argument of an RL.* command\r\n"},
		{"CONFIG GET save", "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"},
		{"CONFIG GET maxmemory", "%0\r\n"},
		{"nosuch a b", "-ERR unknown command 'nosuch', with args beginning with: 'a' 'b' \r\n"},
		{"ECHO", "-ERR wrong number of arguments for 'echo' command\r\n"},
		{"QUIT", "+OK\r\n"},
	} {
		if got := s.do(sess, c.line); got != c.want {
			t.Errorf("%s = %q; want %q", c.line, got, c.want)
		}
	}
	if !sess.quit {
		t.Error("QUIT did not mark the session to close")
	}
	if got := s.do(&session{}, "HELLO 2"); !strings.HasPrefix(got, "*14\r\n") {
		t.Errorf("HELLO 2 = %q; want a flat array of 14", got)
	}
}

// TestCommandDocs: every command has a summary and is in COMMAND DOCS,
// COMMAND INFO and COMMAND LIST.
func TestCommandDocs(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	docs := s.do(&session{}, "COMMAND DOCS")
	info := s.do(&session{}, "COMMAND INFO")
	for name, c := range s.cmds {
		if c.summary == "" {
			t.Errorf("%s has no summary", name)
		}
		if !strings.Contains(docs, "$"+fmt.Sprint(len(name))+"\r\n"+name+"\r\n") || !strings.Contains(info, name) {
			t.Errorf("%s is missing from COMMAND DOCS or INFO", name)
		}
	}
	// redis-cli builds its hints from a block's parts.
	for name, c := range s.cmds {
		for _, a := range c.args {
			if a.typ == "block" && len(a.args) == 0 {
				t.Errorf("%s: block argument %s has no parts", name, a.name)
			}
		}
	}
	if got := s.do(&session{}, "COMMAND INFO rl.reduce nosuch"); !strings.HasPrefix(got, "*2\r\n*10\r\n$9\r\nrl.reduce\r\n:-4\r\n") || !strings.HasSuffix(got, "$-1\r\n") {
		t.Errorf("COMMAND INFO rl.reduce nosuch = %q", got)
	}
}

// TestKindErrors: the other commands name their arguments in errors.
func TestKindErrors(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	for _, c := range []struct{ line, want string }{
		{"RL.INCR k BY x", "-ERR BY: value is not a number\r\n"},
		{"RL.INCR k WINDOW 5000", "-ERR WINDOW: "},
		{"RL.INCR k BY 1e10", "-ERR BY: "},
		{"RL.RATE k DIFF nan", "-ERR DIFF: value is not a number\r\n"},
		{"RL.INCR k FOO 1", "-ERR syntax error: unknown option FOO\r\n"},
		{"RL.ALLOW k 1000 x", "-ERR limits[0].limit: value is not a number\r\n"},
		{"RL.ALLOW k 7000 1", "-ERR limits[0].window_size: "},
		{"RL.ALLOW k COST 1", "-ERR syntax error: "},
		{"RL.ALLOW k 1000 1 COST -1", "-ERR cost: "},
		{"RL.LEAKY k 0 1000", "-ERR size: "},
		{"RL.LEAKY k 1 1000 WAIT 999999", "-ERR WAIT: "},
		{"RL.FIXED k 1 0", "-ERR period: "},
		{"RL.FIXED k 1 1000 TAKE -1", "-ERR TAKE: "},
		{"RL.ACQUIRE k 0 1000", "-ERR limit: "},
		{"RL.ACQUIRE k 1 0", "-ERR ttl: "},
		{"RL.RELEASE nosuch", "-ERR lease: "},
		{"RL.RENEW nosuch 1000", "-ERR lease: "},
		{"RL.INCR k NS nope", "-NOTFOUND NS: "},
	} {
		if got := s.do(sess, c.line); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s = %q; want it to begin %q", c.line, got, c.want)
		}
	}
}

// TestPolicyCommand: RL.POLICY decides by a namespace's policy as
// RL.ALLOW does by the limits it lists; a policy in shadow mode answers
// dry_run and would_allow; an unknown policy is an error naming it.
func TestPolicyCommand(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{resp3: true}
	allowed := "%6\r\n$7\r\nallowed\r\n#t\r\n"
	for i, want := range []string{allowed, allowed, "%6\r\n$7\r\nallowed\r\n#f\r\n"} {
		got := s.do(sess, "RL.POLICY k login NS api")
		if !strings.HasPrefix(got, want) {
			t.Errorf("call %d: RL.POLICY k login = %q; want it to begin %q", i+1, got, want)
		}
		if lst := s.do(sess, "RL.ALLOW l 3600000 2 NS api"); lst != got {
			t.Errorf("call %d: RL.POLICY answers %q, RL.ALLOW with its limits %q", i+1, got, lst)
		}
	}
	if got := s.do(sess, "RL.POLICY k trial NS api"); !strings.HasPrefix(got, "%8\r\n$7\r\nallowed\r\n#t\r\n") || !strings.HasSuffix(got, "$7\r\ndry_run\r\n#t\r\n$11\r\nwould_allow\r\n#t\r\n") {
		t.Errorf("first dry run = %q", got)
	}
	if got := s.do(sess, "RL.POLICY k trial NS api"); !strings.HasPrefix(got, "%8\r\n$7\r\nallowed\r\n#t\r\n") || !strings.HasSuffix(got, "$7\r\ndry_run\r\n#t\r\n$11\r\nwould_allow\r\n#f\r\n") {
		t.Errorf("second dry run = %q: want admitted, would not allow", got)
	}
	for _, c := range []struct{ line, want string }{
		{"RL.POLICY k signup NS api", "-ERR policy: policy \"signup\" is not defined in namespace \"api\"\r\n"},
		{"RL.POLICY k login", "-ERR policy: policy \"login\" is not defined in namespace \"default\"\r\n"},
		{"RL.POLICY k login NS api COST -1", "-ERR cost: "},
		{"RL.POLICY k login NS api FOO", "-ERR syntax error: unknown option FOO\r\n"},
		{"RL.POLICY k", "-ERR wrong number of arguments for 'rl.policy' command\r\n"},
		{"RL.POLICY k login NS nope", "-NOTFOUND NS: "},
	} {
		if got := s.do(sess, c.line); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s = %q; want it to begin %q", c.line, got, c.want)
		}
	}
}

// TestResetCommand: RL.RESET forgets a key's counts and answers its
// rates after, in every window size of its namespace.
func TestResetCommand(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{resp3: true}
	s.do(sess, "RL.INCR k BY 5 NS api")
	s.do(sess, "RL.INCR j BY 2 NS api")
	if got, want := s.do(sess, "RL.RESET k NS api"), "%3\r\n$5\r\n100ms\r\n,0\r\n$2\r\n1s\r\n,0\r\n$5\r\n3600s\r\n,0\r\n"; got != want {
		t.Errorf("RL.RESET k = %q; want %q", got, want)
	}
	if got, want := s.do(sess, "RL.RATE k WINDOW 3600000 NS api"), "%1\r\n$5\r\n3600s\r\n,0\r\n"; got != want {
		t.Errorf("RL.RATE k after the reset = %q; want %q", got, want)
	}
	if got, want := s.do(sess, "RL.RATE j WINDOW 3600000 NS api"), "%1\r\n$5\r\n3600s\r\n,2\r\n"; got != want {
		t.Errorf("RL.RATE j after k's reset = %q; want %q", got, want)
	}
	for _, c := range []struct{ line, want string }{
		{"RL.RESET", "-ERR wrong number of arguments for 'rl.reset' command\r\n"},
		{"RL.RESET k NS", "-ERR syntax error: NS needs a value\r\n"},
		{"RL.RESET k FOO 1", "-ERR syntax error: unknown option FOO\r\n"},
		{"RL.RESET k NS nope", "-NOTFOUND NS: "},
	} {
		if got := s.do(sess, c.line); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s = %q; want it to begin %q", c.line, got, c.want)
		}
	}
}

// TestResetBucketsAndLeasesCommand: RL.RESET with TOKEN, LEAKY or FIXED
// makes those buckets new (each as RL.PREDUCE, RL.LEAKY and RL.FIXED name
// it, in milliseconds), with LEASES frees the key's leases, and answers
// OK; the key's windows are left alone; bad arguments name the bucket.
func TestResetBucketsAndLeasesCommand(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{resp3: true}
	refused := "%6\r\n$7\r\nallowed\r\n#f\r\n"
	admitted := "%6\r\n$7\r\nallowed\r\n#t\r\n"
	s.do(sess, "RL.INCR k BY 5 NS api")
	for _, c := range []struct{ take, reset string }{
		{"RL.PREDUCE k 2 60000 REFILL 1 NS api", "TOKEN 2 60000 REFILL 1"},
		{"RL.LEAKY k 2 60000 NS api", "LEAKY 2 60000"},
		{"RL.FIXED k 2 60000 NS api", "FIXED 2 60000"},
	} {
		s.do(sess, c.take)
		s.do(sess, c.take)
		if got := s.do(sess, c.take); !strings.HasPrefix(got, refused) && got != ":0\r\n" {
			t.Fatalf("%s past the limit = %q; want refused", c.take, got)
		}
		if got := s.do(sess, "RL.RESET k NS api "+c.reset); got != "+OK\r\n" {
			t.Errorf("RL.RESET k %s = %q; want OK", c.reset, got)
		}
		if got := s.do(sess, c.take); !strings.HasPrefix(got, admitted) && got != ":2\r\n" {
			t.Errorf("%s after the reset = %q; want admitted", c.take, got)
		}
	}
	if got, want := s.do(sess, "RL.RATE k WINDOW 3600000 NS api"), "%1\r\n$5\r\n3600s\r\n,5\r\n"; got != want {
		t.Errorf("RL.RATE k after the bucket resets = %q; want %q", got, want)
	}
	s.do(sess, "RL.ACQUIRE job 1 60000")
	if got := s.do(sess, "RL.RESET job leases fixed 1 1000 token 1 1000"); got != "+OK\r\n" {
		t.Errorf("RL.RESET job LEASES = %q; want OK", got)
	}
	if got := s.do(sess, "RL.ACQUIRE job 1 60000"); !strings.Contains(got, "$8\r\nacquired\r\n#t\r\n") {
		t.Errorf("RL.ACQUIRE after the reset of leases = %q; want acquired", got)
	}
	for _, c := range []struct{ line, want string }{
		{"RL.RESET k TOKEN 2", "-ERR syntax error: TOKEN needs two values\r\n"},
		{"RL.RESET k TOKEN 2 1000 REFILL", "-ERR syntax error: REFILL needs a value\r\n"},
		{"RL.RESET k LEASES LEASES", "-ERR syntax error: LEASES given twice\r\n"},
		{"RL.RESET k NS api NS api", "-ERR syntax error: NS given twice\r\n"},
		{"RL.RESET k LEAKY x 1000", "-ERR buckets[0].leaky.size: "},
		{"RL.RESET k FIXED 1 1000 FIXED 1 x", "-ERR buckets[1].fixed.period: "},
		{"RL.RESET k TOKEN 1 0", "-ERR buckets[0].token.refill_time: "},
		{"RL.RESET k FIXED 1 1000 FIXED 1 1000", "-ERR buckets[1].fixed: "},
	} {
		if got := s.do(sess, c.line); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s = %q; want it to begin %q", c.line, got, c.want)
		}
	}
}

// TestLeases: acquire, renew, release through the commands.
func TestLeases(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{resp3: true}
	got := s.do(sess, "RL.ACQUIRE job 1 60000")
	i := strings.Index(got, "$5\r\nlease\r\n$")
	if i < 0 {
		t.Fatalf("RL.ACQUIRE = %q; want a lease", got)
	}
	rest := got[i+len("$5\r\nlease\r\n$"):]
	var n int
	fmt.Sscanf(rest, "%d", &n)
	lease := rest[strings.Index(rest, "\r\n")+2:][:n]
	if got := s.do(sess, "RL.ACQUIRE job 1 60000"); !strings.Contains(got, "$8\r\nacquired\r\n#f\r\n") || !strings.Contains(got, "$5\r\nlease\r\n_\r\n") {
		t.Errorf("second RL.ACQUIRE = %q; want refused", got)
	}
	if got := s.do(sess, "RL.RENEW "+lease+" 1000"); !strings.HasPrefix(got, "%2\r\n$7\r\nrenewed\r\n#t\r\n") {
		t.Errorf("RL.RENEW = %q", got)
	}
	if got := s.do(sess, "RL.RELEASE "+lease); got != "%2\r\n$8\r\nreleased\r\n#t\r\n$7\r\npending\r\n#f\r\n" {
		t.Errorf("RL.RELEASE = %q", got)
	}
	if got := s.do(sess, "RL.RELEASE "+lease); got != "%2\r\n$8\r\nreleased\r\n#f\r\n$7\r\npending\r\n#f\r\n" {
		t.Errorf("second RL.RELEASE = %q", got)
	}
}

package resp

import (
	"fmt"
	"strings"
	"testing"
)

// TestSmyteArgumentCounts: smyte's command table takes 3 to 8 arguments
// after the name for RL.GET and RL.PGET, 3 to 10 for RL.REDUCE and
// RL.PREDUCE, and answers Redis's wrong-number text beyond them; NS and
// its value are not counted. Each command at each bound, with and
// without NS (at the end, and among the options).
func TestSmyteArgumentCounts(t *testing.T) {
	for _, c := range []struct {
		name   string
		reduce bool
		at     string
	}{
		{"rl.get", false, fmt.Sprint(minute.Unix())},
		{"rl.pget", false, fmt.Sprint(minute.UnixMilli())},
		{"rl.reduce", true, fmt.Sprint(minute.Unix())},
		{"rl.preduce", true, fmt.Sprint(minute.UnixMilli())},
	} {
		s := newTestServer(t, newService(t, newClock()), Config{})
		sess := &session{}
		wrong := "-ERR wrong number of arguments for '" + c.name + "' command\r\n"
		largest := "k 5 60 REFILL 1 AT " + c.at + " STRICT" // 8 arguments
		if c.reduce {
			largest = "k 5 60 REFILL 1 TAKE 1 AT " + c.at + " STRICT" // 10
		}
		name := strings.ToUpper(c.name)
		for _, tc := range []struct {
			args string
			ok   bool
		}{
			{"k 5", false},                      // 2: one below
			{"k 5 60", true},                    // 3: the smallest
			{largest, true},                     // the largest
			{largest + " STRICT", false},        // one above
			{largest + " NS", false},            // one above: a lone NS is counted
			{"k 5 NS api", false},               // 2 and NS
			{"k 5 60 NS api", true},             // 3 and NS
			{"k 5 60 NS api REFILL 1", true},    // NS among the options
			{largest + " NS api", true},         // the largest and NS
			{largest + " STRICT NS api", false}, // one above and NS
			{"NS 5 60 NS api", true},            // a key named NS is counted
			{"NS 5", false},                     // and does not take NS's place
			{strings.Replace(largest, "k", "NS", 1), true},
		} {
			line := name + " " + tc.args
			got := s.do(sess, line)
			switch {
			case tc.ok && !strings.HasPrefix(got, ":"):
				t.Errorf("%s = %q; want an integer", line, got)
			case !tc.ok && got != wrong:
				t.Errorf("%s = %q; want %q", line, got, wrong)
			}
		}
	}
}

// TestSmyteCountRefusesTake: the 11-argument RL.REDUCE is
// refused and takes nothing.
func TestSmyteCountRefusesTake(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	at := fmt.Sprint(minute.Unix())
	if got := s.do(sess, "RL.REDUCE k 5 60 REFILL 5 TAKE 2 AT "+at+" STRICT STRICT"); got != "-ERR wrong number of arguments for 'rl.reduce' command\r\n" {
		t.Errorf("11 arguments: %q", got)
	}
	if got := s.do(sess, "RL.GET k 5 60 REFILL 1 AT "+at+" STRICT STRICT"); got != "-ERR wrong number of arguments for 'rl.get' command\r\n" {
		t.Errorf("RL.GET with 9 arguments: %q", got)
	}
	if got := s.do(sess, "RL.GET k 5 60"); got != ":5\r\n" {
		t.Errorf("the bucket after a refused RL.REDUCE = %q; want :5", got)
	}
}

// TestSyntaxErrorTexts: every syntax error of the RL.* commands says
// what was wrong after Redis's "ERR syntax error".
func TestSyntaxErrorTexts(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	at := fmt.Sprint(minute.Unix())
	for _, c := range []struct{ line, want string }{
		{"RL.REDUCE k 1 60 STRICT STRICT", "STRICT given twice"},
		{"rl.reduce k 1 60 strict Strict", "STRICT given twice"},
		{"RL.GET k 1 60 AT " + at + " at " + at, "AT given twice"},
		{"RL.PREDUCE k 1 60 REFILL 1 refill 1", "REFILL given twice"},
		{"RL.REDUCE k 1 60 TAKE 1 TAKE 1", "TAKE given twice"},
		{"RL.REDUCE k 1 60 NS default NS api", "NS given twice"},
		{"RL.REDUCE k 1 60 BOGUS", "unknown option BOGUS"},
		{"RL.REDUCE k 1 60 BOGUS 1", "unknown option BOGUS"},
		{"RL.GET k 1 60 bogus", "unknown option bogus"},
		{"RL.REDUCE k 1 60 TAKE", "TAKE needs a value"},
		{"RL.PGET k 1 60 NS", "NS needs a value"},
		{"RL.GET k 1 60 TAKE 1", "TAKE is not an option of RL.GET, which takes no tokens"},
		{"RL.INCR k BOGUS 1", "unknown option BOGUS"},
		{"RL.INCR k BY 1 BY 2", "BY given twice"},
		{"RL.INCR k WINDOW", "WINDOW needs a value"},
		{"RL.RATE k DIFF 1 diff 1", "DIFF given twice"},
		{"RL.RATE k BY 1", "unknown option BY"},
		{"RL.ALLOW k 1000 1 2000", "window 2000 has no limit"},
		{"RL.ALLOW k 1000 1 PENALTY PENALTY", "PENALTY given twice"},
		{"RL.ALLOW k 1000 1 COST 1 COST 1", "COST given twice"},
		{"RL.ALLOW k 1000 1 TAKE 1", "unknown option TAKE"},
		{"RL.ALLOW k COST 1", "RL.ALLOW key window limit [window limit ...] [COST n] [PENALTY] [AT ms] [NS namespace]"},
		{"RL.LEAKY k 1 1000 WAIT", "WAIT needs a value"},
		{"RL.LEAKY k 1 1000 WAIT 1 WAIT 1", "WAIT given twice"},
		{"RL.FIXED k 1 1000 WAIT 1", "unknown option WAIT"},
		{"RL.FIXED k 1 1000 COST 1", "unknown option COST"},
		{"RL.ACQUIRE k 1 1000 BOGUS", "unknown option BOGUS"},
		{"RL.ACQUIRE k 1 1000 NS", "NS needs a value"},
	} {
		if got, want := s.do(sess, c.line), "-ERR syntax error: "+c.want+"\r\n"; got != want {
			t.Errorf("%s = %q; want %q", c.line, got, want)
		}
	}
	// Redis's wrong-number text, the name as the table has it.
	for _, c := range []struct{ line, want string }{
		{"RL.REDUCE k", "rl.reduce"},
		{"rl.incr", "rl.incr"},
		{"RL.ACQUIRE k 1 1000 NS a NS b", "rl.acquire"},
		{"RL.RENEW lease", "rl.renew"},
	} {
		if got, want := s.do(sess, c.line), "-ERR wrong number of arguments for '"+c.want+"' command\r\n"; got != want {
			t.Errorf("%s = %q; want %q", c.line, got, want)
		}
	}
}

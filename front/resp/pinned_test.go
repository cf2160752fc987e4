package resp

import (
	"bytes"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/service"
)

// TestHelloOptions: HELLO alone answers in the session's protocol; an
// AUTH or SETNAME option without its values is a syntax error, not read
// past the command's end; SETNAME's name follows CLIENT SETNAME's rule.
func TestHelloOptions(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{id: 3}
	if got := s.do(sess, "HELLO"); !strings.HasPrefix(got, "*14\r\n") || !strings.Contains(got, "$5\r\nproto\r\n:2\r\n") {
		t.Errorf("HELLO = %q; want RESP2's flat array of 14, proto 2", got)
	}
	for _, c := range []struct{ line, want string }{
		{"HELLO 3 AUTH default", "-ERR syntax error in HELLO option 'AUTH'\r\n"},
		{"HELLO 3 SETNAME", "-ERR syntax error in HELLO option 'SETNAME'\r\n"},
		{"HELLO 3 SETNAME bad\x7fname", "-" + errClientName + "\r\n"},
	} {
		if got := s.do(sess, c.line); got != c.want {
			t.Errorf("%q = %q; want %q", c.line, got, c.want)
		}
	}
	if sess.resp3 || sess.name != "" {
		t.Errorf("after refused HELLOs: resp3 %v, name %q; want neither changed", sess.resp3, sess.name)
	}
}

// TestClientNameRule: a client name is 1 to 256 bytes from '!' to '~'
// (Redis's rule), both ends included.
func TestClientNameRule(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	for name, ok := range map[string]bool{
		"!~":                     true,
		strings.Repeat("n", 256): true,
		strings.Repeat("n", 257): false,
		"a\x7f":                  false,
		"a\x1f":                  false,
	} {
		want := "+OK\r\n"
		if !ok {
			want = "-" + errClientName + "\r\n"
		}
		if got := s.do(sess, "CLIENT SETNAME "+name); got != want {
			t.Errorf("CLIENT SETNAME %q = %q; want %q", name, got, want)
		}
	}
}

// TestSubcommandArity: CLIENT INFO and COMMAND LIST take no argument;
// with one they are refused as Redis refuses them.
func TestSubcommandArity(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{id: 5, name: "app"}
	if got := s.do(sess, "CLIENT INFO"); !strings.Contains(got, "id=5 name=app ") {
		t.Errorf("CLIENT INFO = %q; want the session's id and name", got)
	}
	if got := s.do(sess, "COMMAND LIST"); !strings.HasPrefix(got, "*"+strconv.Itoa(len(s.cmds))+"\r\n") {
		t.Errorf("COMMAND LIST = %q; want an array of the %d commands", got, len(s.cmds))
	}
	for _, line := range []string{"CLIENT INFO x", "COMMAND LIST x"} {
		if got := s.do(sess, line); !strings.HasPrefix(got, "-ERR unknown subcommand") {
			t.Errorf("%s = %q; want an unknown subcommand error", line, got)
		}
	}
}

// TestInfoCounts: INFO's total_commands_processed counts the commands of
// the session not yet added to the metrics, a queued command once (when
// EXEC runs it), and uptime_in_seconds is in seconds.
func TestInfoCounts(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess := &session{}
	field := func(info, name string) int64 {
		t.Helper()
		m := regexp.MustCompile(name + `:(-?\d+)\r\n`).FindStringSubmatch(info)
		if m == nil {
			t.Fatalf("INFO has no %s: %q", name, info)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	s.do(sess, "PING")
	s.do(sess, "PING")
	if got := field(s.do(sess, "INFO"), "total_commands_processed"); got != 2 {
		t.Errorf("total_commands_processed after two PINGs = %d, want 2", got)
	}
	// INFO itself (1), MULTI (1), the PING it queues (1, when EXEC runs
	// it), EXEC (1).
	for _, line := range []string{"MULTI", "PING", "EXEC"} {
		s.do(sess, line)
	}
	if got := field(s.do(sess, "INFO"), "total_commands_processed"); got != 6 {
		t.Errorf("total_commands_processed after MULTI, PING, EXEC = %d, want 6", got)
	}
	// The server started within this test: well under an hour ago.
	if got := field(s.do(sess, "INFO"), "uptime_in_seconds"); got < 0 || got >= 3600 {
		t.Errorf("uptime_in_seconds = %d; want the seconds since the server started", got)
	}
}

// TestClientErrorsNotLogged: an error that is the client's (a wrong
// number of arguments, an unknown command) is answered and not logged.
func TestClientErrorsNotLogged(t *testing.T) {
	var buf bytes.Buffer
	s, err := New(newService(t, newClock()), Config{}, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"ECHO", "RL.ALLOW k", "SELECT 1"} {
		if got := s.do(&session{}, line); !strings.HasPrefix(got, "-") {
			t.Errorf("%s = %q; want an error", line, got)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("log %q; want nothing", buf.String())
	}
}

// TestCommandInfoKeys: COMMAND INFO gives a limiter command that takes a
// key its first key, last key and step (1, 1, 1), as clients that route by
// key read them; one that takes a lease, or a connection command, has
// none (0, 0, 0).
func TestCommandInfoKeys(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	for name, want := range map[string]string{
		"RL.ALLOW":   "+write\r\n+fast\r\n:1\r\n:1\r\n:1\r\n",
		"RL.RATE":    "+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n",
		"RL.RELEASE": "+write\r\n+fast\r\n:0\r\n:0\r\n:0\r\n",
		"PING":       "+fast\r\n:0\r\n:0\r\n:0\r\n",
	} {
		if got := s.do(&session{}, "COMMAND INFO "+name); !strings.Contains(got, want) {
			t.Errorf("COMMAND INFO %s = %q; want flags and keys %q", name, got, want)
		}
	}
}

// TestFrameGuardBounds: the guard admits a command of exactly the cap and
// refuses one byte more; an array header is refused when its elements,
// at 6 bytes each at least, could not fit in what is left of the cap,
// and not before; a bulk header of exactly the cap is not refused by
// its header (the command is, by its length); commands are counted.
func TestFrameGuardBounds(t *testing.T) {
	ping := "*1\r\n$4\r\nPING\r\n" // 14 bytes
	for _, c := range []struct {
		name string
		max  int64
		in   string
		err  string // "" when all of in is admitted
	}{
		{"a command of the cap", 14, ping, ""},
		{"an inline command of the cap", 6, "PING\r\n", ""},
		{"an inline command past the cap", 5, "PING\r\n", "command longer than the limit of 5 bytes"},
		{"a command one byte past the cap", 13, ping, "command longer than the limit of 13 bytes"},
		// "*9\r" is 3 bytes: (60-3)/6 = 9 elements may follow.
		{"an array that may fit", 60, "*9\r\n", ""},
		{"an array that cannot fit", 60, "*10\r\n", "an array of 10 elements exceeds"},
		{"a bulk string of the cap", 20, "*1\r\n$20\r\n" + strings.Repeat("x", 22), "command longer than the limit of 20 bytes"},
		{"a bulk string past the cap", 20, "*1\r\n$21\r\n", "a bulk string of 21 bytes exceeds"},
		{"an array without its count", 100, "*\r\n", "invalid multibulk length"},
		{"a bulk string without its length", 100, "*1\r\n$\r\n", "invalid bulk length"},
		{"a count of 18 digits", 100, "*100000000000000000\r\n", "an array of 100000000000000000 elements exceeds"},
		{"a count of 19 digits", 100, "*1000000000000000000\r\n", "invalid multibulk length"},
	} {
		g := frameGuard{max: c.max}
		n, err := g.scan([]byte(c.in))
		switch {
		case c.err == "" && (err != nil || n != len(c.in)):
			t.Errorf("%s: scanned %d of %d bytes, %v; want all admitted", c.name, n, len(c.in), err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.err)
		}
	}
	for name, in := range map[string]string{"inline": "PING\r\n\nPING\r\n", "array": ping + ping} {
		g := frameGuard{max: 100}
		if _, err := g.scan([]byte(in)); err != nil || g.done != 2 || g.mid() {
			t.Errorf("two %s commands: %v, done %d, mid %v; want 2 done, none begun", name, err, g.done, g.mid())
		}
	}
}

// TestDurationArgumentBounds: a duration argument in milliseconds is read
// up to the largest (and down to the least) that a time.Duration holds,
// for the service to judge; one past is out of range. RL.ALLOW's window
// sizes are read from 0.
func TestDurationArgumentBounds(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	for _, c := range []struct{ line, want string }{
		{"RL.ACQUIRE k 1 9223372036854", "-ERR ttl: must be positive and at most the namespace's max_lease_ttl 1h0m0s, got 2562047h47m16.854s\r\n"},
		{"RL.ACQUIRE k 1 9223372036855", "-ERR ttl: value is not an integer or out of range\r\n"},
		{"RL.ACQUIRE k 1 -9223372036854", "-ERR ttl: must be positive and at most the namespace's max_lease_ttl 1h0m0s, got -2562047h47m16.854s\r\n"},
		{"RL.ACQUIRE k 1 -9223372036855", "-ERR ttl: value is not an integer or out of range\r\n"},
		{"RL.ALLOW k 9223372036854 10", "-ERR limits[0].window_size: namespace \"default\" has no window size 2562047h47m16.854s (configured: 1s, 1m0s)\r\n"},
		{"RL.ALLOW k 9223372036855 10", "-ERR limits[0].window_size: value is not an integer or out of range\r\n"},
		{"RL.ALLOW k 0 10", "-ERR limits[0].window_size: is required\r\n"},
		{"RL.ALLOW k -1 10", "-ERR limits[0].window_size: value is not an integer or out of range\r\n"},
		{"RL.ALLOW k" + strings.Repeat(" 1000 10", service.MaxLimits+2), "-ERR limits: at most " + strconv.Itoa(service.MaxLimits) + " window limit pairs\r\n"},
	} {
		if got := s.do(&session{}, c.line); got != c.want {
			t.Errorf("%s = %q; want %q", c.line, got, c.want)
		}
	}
}

// TestTimeArgumentBounds: AT is read from 0 (the epoch, not "now") up to
// the last Unix time a time.Time of nanoseconds holds, in milliseconds or
// (RL.REDUCE) seconds, for the service to judge; a negative one, or one
// past, is out of range.
func TestTimeArgumentBounds(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	window := func(limit, got string) string {
		return "-ERR at: must be within [now - " + limit + ", now + 1s] (now is 2023-11-14T22:14:00Z), got " + got + "\r\n"
	}
	const outOfRange = "-ERR at: value is not an integer or out of range\r\n"
	for _, c := range []struct{ line, want string }{
		{"RL.INCR k AT 0", window("1m0s", "1970-01-01T00:00:00.000000001Z")},
		{"RL.INCR k AT -1", outOfRange},
		{"RL.INCR k AT 9223372036854", window("1m0s", "2262-04-11T23:47:16.854Z")},
		{"RL.INCR k AT 9223372036855", outOfRange},
		{"RL.REDUCE k 10 10 AT 9223372036", window("8784h0m0s", "2262-04-11T23:47:16Z")},
		{"RL.REDUCE k 10 10 AT 9223372037", outOfRange},
	} {
		if got := s.do(&session{}, c.line); got != c.want {
			t.Errorf("%s = %q; want %q", c.line, got, c.want)
		}
	}
}

// TestReduceLeastArguments: RL.REDUCE with TAKE 0 answers the tokens and takes
// none, as Smyte's; a negative TAKE is out of range; the least max,
// refilltime and refill, 1, are accepted.
func TestReduceLeastArguments(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	for _, c := range []struct{ line, want string }{
		{"RL.REDUCE k 10 60 TAKE 0", ":10\r\n"},
		{"RL.REDUCE k 10 60 TAKE 0", ":10\r\n"},
		{"RL.REDUCE k 10 60 TAKE -1", "-ERR take: value is not an integer or out of range\r\n"},
		{"RL.REDUCE k 10 60", ":10\r\n"},
		{"RL.REDUCE k 10 60 TAKE 0", ":9\r\n"},
		{"RL.REDUCE j 1 1 REFILL 1", ":1\r\n"},
		{"RL.REDUCE j 1 0", "-ERR refilltime: value is not an integer or out of range\r\n"},
	} {
		if got := s.do(&session{}, c.line); got != c.want {
			t.Errorf("%s = %q; want %q", c.line, got, c.want)
		}
	}
}

// TestDecisionWithoutLimits: a decision that carries no limit's status is
// still answered, with the binding limit's fields at 0.
func TestDecisionWithoutLimits(t *testing.T) {
	var w reply
	writeDecision(&w, service.Decision{Allowed: true})
	want := "*12\r\n$7\r\nallowed\r\n:1\r\n$5\r\nnever\r\n:0\r\n$5\r\nlimit\r\n$1\r\n0\r\n$9\r\nremaining\r\n$1\r\n0\r\n" +
		"$14\r\nretry_after_ms\r\n:0\r\n$14\r\nreset_after_ms\r\n:0\r\n"
	if got := string(w.b); got != want {
		t.Errorf("the decision = %q; want %q", got, want)
	}
}

// TestWindowLabel: a window size is named in whole seconds when it is
// one, else in whole milliseconds (1500ms, not Go's 1.5s), else in Go's
// form.
func TestWindowLabel(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute:             "60s",
		1500 * time.Millisecond: "1500ms",
		100 * time.Millisecond:  "100ms",
		1500 * time.Microsecond: "1.5ms",
	} {
		if got := windowLabel(d); got != want {
			t.Errorf("windowLabel(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestConfigDefaults: a zero field takes its default, a set one stays.
func TestConfigDefaults(t *testing.T) {
	if got, want := (Config{}).withDefaults(), DefaultConfig(); got.MaxCommandSize != want.MaxCommandSize ||
		got.MaxClients != want.MaxClients || got.MaxPendingReplies != want.MaxPendingReplies ||
		got.WriteTimeout != want.WriteTimeout || got.CommandTimeout != want.CommandTimeout ||
		got.MaxQueuedCommands != want.MaxQueuedCommands || got.MaxQueuedBytes != want.MaxQueuedBytes || got.Version != "0.0.0" {
		t.Errorf("zero config with defaults = %+v, want %+v and version 0.0.0", got, want)
	}
	set := Config{MaxCommandSize: 1, MaxClients: 2, MaxPendingReplies: 3, WriteTimeout: 4, CommandTimeout: 5,
		MaxQueuedCommands: 6, MaxQueuedBytes: 7, Version: "1.2.3"}
	if got := set.withDefaults(); got.MaxCommandSize != 1 || got.MaxClients != 2 || got.MaxPendingReplies != 3 ||
		got.WriteTimeout != 4 || got.CommandTimeout != 5 || got.MaxQueuedCommands != 6 || got.MaxQueuedBytes != 7 || got.Version != "1.2.3" {
		t.Errorf("set config with defaults = %+v, want it unchanged", got)
	}
}

// TestAppendFloatInfinities: the infinities and NaN print as Redis
// prints them.
func TestAppendFloatInfinities(t *testing.T) {
	for v, want := range map[float64]string{math.Inf(1): "inf", math.Inf(-1): "-inf", 1.5: "1.5"} {
		if got := string(appendFloat(nil, v)); got != want {
			t.Errorf("appendFloat(%v) = %q, want %q", v, got, want)
		}
	}
	if got := string(appendFloat(nil, math.NaN())); got != "nan" {
		t.Errorf("appendFloat(NaN) = %q, want nan", got)
	}
}

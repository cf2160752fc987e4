package resp

import (
	"strings"
	"testing"
)

// TestVariadicCommandsTakeMoreArguments: the commands Redis gives a
// variable arity take more arguments here too: WATCH several keys (and is
// refused for what it is, not for its count), QUIT and INFO words after
// their name; COMMAND INFO reports Redis's arities for them.
func TestVariadicCommandsTakeMoreArguments(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	if got := s.do(&session{}, "WATCH a b c"); !strings.Contains(got, "WATCH is not supported") {
		t.Errorf("WATCH a b c = %q, want WATCH's refusal", got)
	}
	if got := s.do(&session{}, "INFO server clients"); !strings.Contains(got, "# Server") || !strings.Contains(got, "# Clients") {
		t.Errorf("INFO server clients = %q, want both sections", got)
	}
	sess := &session{}
	if got := s.do(sess, "QUIT now"); got != "+OK\r\n" || !sess.quit {
		t.Errorf("QUIT now = %q (closing %v), want +OK and the session closing", got, sess.quit)
	}
	for name, arity := range map[string]string{"watch": ":-2", "quit": ":-1", "info": ":-1"} {
		if got := s.do(&session{}, "COMMAND INFO "+name); !strings.HasPrefix(got, "*1\r\n*10\r\n$"+string(rune('0'+len(name)))+"\r\n"+name+"\r\n"+arity+"\r\n") {
			t.Errorf("COMMAND INFO %s = %q, want arity %s", name, got, arity[1:])
		}
	}
}

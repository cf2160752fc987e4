package resp

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
)

// sleepClock is a fake clock that sleeping moves, so that a leaky
// bucket's WAIT costs a fuzzer no time.
type sleepClock struct{ *fakeclock.Clock }

func (c sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Add(d)
	return nil
}

// seedCommands are a seed of every command.
var seedCommands = []string{
	"RL.REDUCE TwoPerMin 2 60", "RL.REDUCE k 10 5 REFILL 3 TAKE 2 AT 1700000000 STRICT NS api",
	"RL.GET k 10 5 REFILL 3 AT 1700000000", "RL.PREDUCE k 10 500 TAKE 4 STRICT", "RL.PGET k 10 500 NS api",
	"RL.INCR k", "RL.INCR k BY 0.5 WINDOW 1000 AT 1700000040000 NS default", "RL.RATE k WINDOW 100 DIFF 2 NS api",
	"RL.ALLOW k 1000 10 60000 100 COST 2 PENALTY", "RL.LEAKY k 10 10000 TAKE 1 WAIT 1000", "RL.FIXED k 5 60000 TAKE 2",
	"RL.ACQUIRE k 2 60000 NS api", "RL.RELEASE AY82a3mH_2igAAAAAAAAAAEHZGVmYXVsdGs", "RL.RENEW AY82a3mH_2igAAAAAAAAAAEHZGVmYXVsdGs 1000",
	"PING", "PING hi", "ECHO x", "HELLO 3 SETNAME app", "HELLO 2", "AUTH pw", "CLIENT SETNAME a", "CLIENT GETNAME",
	"CLIENT SETINFO LIB-NAME go-redis", "CLIENT ID", "CLIENT INFO", "COMMAND", "COMMAND COUNT", "COMMAND DOCS rl.reduce",
	"COMMAND INFO rl.allow nosuch", "COMMAND LIST", "SELECT 0", "SELECT 9", "QUIT", "INFO", "CONFIG GET save", "NOSUCH a",
}

// FuzzCommand runs arbitrary argument lists (split on spaces; a first
// byte 3 switches to RESP3) through the command layer: it never panics,
// and every command writes exactly one well-formed reply.
func FuzzCommand(f *testing.F) {
	for _, c := range seedCommands {
		f.Add(c)
		f.Add("\x03" + c)
	}
	svc := newService(f, sleepClock{newClock()})
	s := newTestServer(f, svc, Config{})
	f.Fuzz(func(t *testing.T, line string) {
		sess := &session{id: 1}
		if len(line) > 0 && line[0] == 3 {
			sess.resp3, line = true, line[1:]
		}
		var args [][]byte
		for _, a := range bytes.Split([]byte(line), []byte(" ")) {
			if len(a) > 0 {
				args = append(args, a)
			}
		}
		if len(args) == 0 {
			return
		}
		s.exec(context.Background(), sess, args)
		rest, err := oneReply(sess.w.b, 0)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%q: reply %q: %v, %d bytes after it", line, sess.w.b, err, len(rest))
		}
	})
}

// oneReply parses one RESP2 or RESP3 value off b and returns what
// follows it.
func oneReply(b []byte, depth int) ([]byte, error) {
	if depth > 8 {
		return nil, errors.New("nested too deep")
	}
	i := bytes.Index(b, []byte("\r\n"))
	if len(b) == 0 || i < 0 {
		return nil, errors.New("no line")
	}
	line, rest := b[1:i], b[i+2:]
	if bytes.ContainsAny(line, "\r\n") {
		return nil, errors.New("a line break inside a line")
	}
	num := func() (int, error) { return strconv.Atoi(string(line)) }
	switch b[0] {
	case '+', '-', ':', ',', '#', '_':
		if b[0] == ':' {
			if _, err := num(); err != nil {
				return nil, err
			}
		}
		return rest, nil
	case '$', '=':
		n, err := num()
		if err != nil {
			return nil, err
		}
		if n == -1 && b[0] == '$' {
			return rest, nil
		}
		if n < 0 || len(rest) < n+2 || string(rest[n:n+2]) != "\r\n" {
			return nil, errors.New("bad bulk")
		}
		return rest[n+2:], nil
	case '*', '%':
		n, err := num()
		if err != nil || n < 0 {
			return nil, errors.New("bad count")
		}
		if b[0] == '%' {
			n *= 2
		}
		for range n {
			if rest, err = oneReply(rest, depth+1); err != nil {
				return nil, err
			}
		}
		return rest, nil
	}
	return nil, errors.New("unknown type " + string(b[:1]))
}

// FuzzFrame feeds arbitrary bytes, cut at arbitrary points, to the frame
// guard: it never panics, never accepts a command over the cap, and
// accepts the same bytes however they are cut.
func FuzzFrame(f *testing.F) {
	f.Add([]byte("*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n"), uint8(3))
	f.Add([]byte("*1\r\n$70\r\n"), uint8(1))
	f.Add([]byte("*99999999\r\n"), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		const max = 64
		whole := frameGuard{max: max}
		n1, err1 := whole.scan(data)
		cutAt := int(cut) % (len(data) + 1)
		parts := frameGuard{max: max}
		n2, err2 := parts.scan(data[:cutAt])
		if err2 == nil {
			var m int
			m, err2 = parts.scan(data[cutAt:])
			n2 += m
		}
		if n1 != n2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("whole: %d, %v; cut at %d: %d, %v", n1, err1, cutAt, n2, err2)
		}
		if err1 == nil && whole.size > max {
			t.Fatalf("a command of %d bytes passed a cap of %d", whole.size, max)
		}
	})
}

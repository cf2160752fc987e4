package resp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestTransactions: MULTI, EXEC, DISCARD and WATCH answer as Redis 7
// does (its answers to the same sequences, with GET and SET in place of
// the RL.* commands); queued commands run only at EXEC.
func TestTransactions(t *testing.T) {
	s := newTestServer(t, newService(t, newClock()), Config{})
	sess, other := &session{}, &session{}
	at := fmt.Sprint(minute.Unix())
	for _, step := range []struct{ line, want string }{
		{"EXEC", "-ERR EXEC without MULTI\r\n"},
		{"DISCARD", "-ERR DISCARD without MULTI\r\n"},
		{"WATCH k", "-ERR WATCH is not supported: limiterd holds no keys a client can read, so there is nothing to watch; send MULTI ... EXEC without it\r\n"},
		{"UNWATCH", "+OK\r\n"},
		// Queued, run at EXEC in order; a syntax error is found then, as
		// Redis finds SET's, and answered in the array.
		{"MULTI", "+OK\r\n"},
		{"MULTI", "-ERR MULTI calls can not be nested\r\n"},
		{"WATCH k", "-ERR WATCH inside MULTI is not allowed\r\n"},
		{"RL.REDUCE k 2 60", "+QUEUED\r\n"},
		{"rl.reduce k 2 60", "+QUEUED\r\n"},
		{"RL.REDUCE k 2 60 BOGUS", "+QUEUED\r\n"},
		{"PING", "+QUEUED\r\n"},
		{"RL.GET k 2 60", "+QUEUED\r\n"},
		{"other: RL.GET k 2 60", ":2\r\n"}, // nothing ran yet
		{"EXEC", "*5\r\n:2\r\n:1\r\n-ERR syntax error: unknown option BOGUS\r\n+PONG\r\n:0\r\n"},
		{"EXEC", "-ERR EXEC without MULTI\r\n"},
		{"MULTI", "+OK\r\n"},
		{"EXEC", "*0\r\n"},
		// An unknown command or a wrong count is answered when queued
		// and aborts the transaction.
		{"MULTI", "+OK\r\n"},
		{"RL.REDUCE j 2 60", "+QUEUED\r\n"},
		{"NOSUCH x", "-ERR unknown command 'NOSUCH', with args beginning with: 'x' \r\n"},
		{"RL.REDUCE j 2 60", "+QUEUED\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"MULTI", "+OK\r\n"},
		{"RL.REDUCE j 2 60", "+QUEUED\r\n"},
		{"RL.GET j 2 60 REFILL 1 AT " + at + " STRICT STRICT", "-ERR wrong number of arguments for 'rl.get' command\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"MULTI", "+OK\r\n"},
		{"DISCARD x", "-ERR wrong number of arguments for 'discard' command\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"MULTI", "+OK\r\n"},
		{"EXEC x", "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"},
		{"EXEC", "-ERR EXEC without MULTI\r\n"},
		{"EXEC x", "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"},
		{"MULTI", "+OK\r\n"},
		{"RL.REDUCE j 2 60", "+QUEUED\r\n"},
		{"DISCARD", "+OK\r\n"},
		{"EXEC", "-ERR EXEC without MULTI\r\n"},
		{"RL.GET j 2 60", ":2\r\n"}, // nothing of the aborted and discarded ones ran
		// The protocol of the connection when a command runs.
		{"MULTI", "+OK\r\n"},
		{"HELLO 3", "+QUEUED\r\n"},
		{"RL.ALLOW q 1000 1", "+QUEUED\r\n"},
		{"EXEC", "*2\r\n%7\r\n"},
		{"MULTI", "+OK\r\n"},
		{"RL.ALLOW q 1000 1", "+QUEUED\r\n"},
		{"EXEC", "*1\r\n%6\r\n$7\r\nallowed\r\n#f\r\n"},
	} {
		se, line := sess, step.line
		if l, ok := strings.CutPrefix(line, "other: "); ok {
			se, line = other, l
		}
		if got := s.do(se, line); !strings.HasPrefix(got, step.want) {
			t.Errorf("%s = %q; want %q", step.line, got, step.want)
		}
	}
}

// TestTransactionCaps: a queue past its cap in commands or bytes is
// discarded with a clear error; every command until EXEC gets it, and
// EXEC answers EXECABORT having run none.
func TestTransactionCaps(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxQueuedCommands: 3}, "-ERR transaction discarded: more than 3 commands queued; send EXEC sooner\r\n"},
		{Config{MaxQueuedBytes: 150}, "-ERR transaction discarded: its queued commands exceed 150 bytes; send EXEC sooner\r\n"},
		// RL.REDUCE k 5 60 is 13 bytes and 4 arguments of 8 more: 45;
		// three fill 135 bytes exactly and are held, the fourth is past.
		{Config{MaxQueuedBytes: 135}, "-ERR transaction discarded: its queued commands exceed 135 bytes; send EXEC sooner\r\n"},
	} {
		s := newTestServer(t, newService(t, newClock()), c.cfg)
		sess := &session{}
		for i, step := range []struct{ line, want string }{
			{"MULTI", "+OK\r\n"},
			{"RL.REDUCE k 5 60", "+QUEUED\r\n"},
			{"RL.REDUCE k 5 60", "+QUEUED\r\n"},
			{"RL.REDUCE k 5 60", "+QUEUED\r\n"},
			{"RL.REDUCE k 5 60", c.want},
			{"RL.REDUCE k 5 60", c.want},
			{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
			{"RL.GET k 5 60", ":5\r\n"},
			{"MULTI", "+OK\r\n"},
			{"RL.REDUCE k 5 60", "+QUEUED\r\n"},
			{"EXEC", "*1\r\n:5\r\n"},
		} {
			if got := s.do(sess, step.line); got != step.want {
				t.Errorf("%+v step %d: %s = %q; want %q", c.cfg, i, step.line, got, step.want)
			}
		}
		if sess.tx != nil {
			t.Errorf("%+v: a transaction is left", c.cfg)
		}
	}
}

// TestTransactionAuth: MULTI needs a principal, as every command does in
// Redis once a password is set; a queued command outside the grants
// answers NOPERM in EXEC's array.
func TestTransactionAuth(t *testing.T) {
	cfg := authConfig(t)
	s := newTestServer(t, newService(t, newClock()).WithAuthorizer(cfg.Authorizer), cfg)
	sess := &session{}
	for _, step := range []struct{ line, want string }{
		{"MULTI", "-" + errNoAuthReply + "\r\n"},
		{"RL.INCR k", "-NOAUTH "}, // not in a transaction: runs
		{"EXEC", "-ERR EXEC without MULTI\r\n"},
		{"AUTH " + testToken, "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"RL.REDUCE k 2 60", "+QUEUED\r\n"},
		{"RL.REDUCE k 2 60 NS api", "+QUEUED\r\n"},
		{"EXEC", "*2\r\n:2\r\n-NOPERM "},
	} {
		if got := s.do(sess, step.line); !strings.HasPrefix(got, step.want) {
			t.Errorf("%s = %q; want %q", step.line, got, step.want)
		}
	}
}

// TestGoRedisTxPipeline: go-redis's transactional pipeline (MULTI ...
// EXEC) of RL.* commands answers as Redis would answer one of its own
// commands, in RESP2 and RESP3: each command its reply, a command's
// error its own, and a command that cannot be queued failing the whole.
func TestGoRedisTxPipeline(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
		key := fmt.Sprint("tx", proto)
		cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for range 3 {
				p.Do(ctx, "RL.REDUCE", key, 2, 60)
			}
			p.Do(ctx, "RL.REDUCE", key, 2, 60, "STRICT", "STRICT")
			p.Do(ctx, "RL.ALLOW", key, 60000, 2)
			return nil
		})
		var got []any
		for _, c := range cmds {
			v, err := c.(*redis.Cmd).Result()
			if err != nil {
				got = append(got, "error: "+err.Error())
				continue
			}
			got = append(got, v)
		}
		// The pipeline's error is its first command's error, as go-redis
		// gives it for Redis.
		if err == nil || err.Error() != "ERR syntax error: STRICT given twice" {
			t.Errorf("RESP%d: TxPipelined error %v; want the syntax error", proto, err)
		}
		if len(got) != 5 || got[0] != int64(2) || got[1] != int64(1) || got[2] != int64(0) || got[3] != "error: ERR syntax error: STRICT given twice" {
			t.Fatalf("RESP%d: replies %v", proto, got)
		}
		m := respMap(t, got[4])
		if respBool(m["allowed"]) != true || respFloat(t, m["remaining"]) != 1 {
			t.Errorf("RESP%d: RL.ALLOW in the transaction = %v", proto, m)
		}

		// A command that cannot be queued fails the transaction: EXEC
		// answers EXECABORT and nothing runs.
		cmds, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "RL.REDUCE", key+"b", 2, 60)
			p.Do(ctx, "RL.REDUCE", key+"b")
			return nil
		})
		if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT Transaction discarded because of previous errors") {
			t.Errorf("RESP%d: an unqueueable command: %v; want EXECABORT", proto, err)
		}
		if len(cmds) != 2 || cmds[1].Err() == nil || cmds[1].Err().Error() != "ERR wrong number of arguments for 'rl.reduce' command" {
			t.Errorf("RESP%d: the unqueueable command's error: %v", proto, cmds)
		}
		if n, err := rdb.Do(ctx, "RL.GET", key+"b", 2, 60).Int64(); err != nil || n != 2 {
			t.Errorf("RESP%d: after EXECABORT, RL.GET = %d, %v; want 2 (nothing ran)", proto, n, err)
		}
		var re redis.Error
		if err := rdb.Watch(ctx, func(*redis.Tx) error { return nil }, key); err == nil || !errors.As(err, &re) || !strings.Contains(err.Error(), "WATCH is not supported") {
			t.Errorf("RESP%d: WATCH: %v; want refused", proto, err)
		}
		rdb.Close()
	}
}

package resp

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkCommand is the command layer alone: parse, one service call,
// encode, over distinct keys, in parallel.
func BenchmarkCommand(b *testing.B) {
	for _, c := range []struct{ name, line string }{
		{"RL.REDUCE", "RL.REDUCE key 1000000000 60"},
		{"RL.INCR", "RL.INCR key"},
		{"RL.ALLOW", "RL.ALLOW key 1000 1000000000"},
		{"PING", "PING"},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newTestServer(b, newService(b, nil), Config{})
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				sess := &session{}
				var lines [][][]byte
				for range 1024 {
					k := strconv.FormatInt(next.Add(1), 10)
					var args [][]byte
					for i, f := range splitFields(c.line) {
						if f == "key" && i == 1 {
							f = "key:" + k
						}
						args = append(args, []byte(f))
					}
					lines = append(lines, args)
				}
				for i := 0; pb.Next(); i++ {
					sess.w.b = sess.w.b[:0]
					s.exec(context.Background(), sess, lines[i%len(lines)])
				}
			})
		})
	}
}

func splitFields(s string) []string {
	var out []string
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' {
			if start >= 0 {
				out = append(out, s[start:i])
			}
			start = -1
		} else if start < 0 {
			start = i
		}
	}
	return out
}

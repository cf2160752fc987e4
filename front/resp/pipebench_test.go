package resp

import (
	"bufio"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
)

// BenchmarkPipeline is the whole front over loopback TCP: clients send
// RL.REDUCE over distinct keys in pipelines of P commands and read the
// replies, as redis-benchmark -P does; an op is one command.
// GOMAXPROCS × 25 connections.
func BenchmarkPipeline(b *testing.B) {
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			_, addr := serveFront(b, newService(b, nil), Config{})
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(25) // 50 connections on 2 cores, as respbench.sh's -c 50
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				rd := bufio.NewReader(c)
				var batches [][]byte
				for range 64 {
					var batch []byte
					for range p {
						key := fmt.Sprintf("key:%d", next.Add(1))
						batch = fmt.Appendf(batch, "*4\r\n$9\r\nRL.REDUCE\r\n$%d\r\n%s\r\n$10\r\n1000000000\r\n$2\r\n60\r\n", len(key), key)
					}
					batches = append(batches, batch)
				}
				for i := 0; ; i++ {
					n := 0
					for n < p && pb.Next() {
						n++
					}
					if n == 0 {
						return
					}
					if _, err := c.Write(batches[i%len(batches)]); err != nil {
						b.Error(err)
						return
					}
					for range p {
						if line, err := rd.ReadSlice('\n'); err != nil || line[0] != ':' {
							b.Errorf("reply %q: %v", line, err)
							return
						}
					}
					if n < p {
						return
					}
				}
			})
		})
	}
}

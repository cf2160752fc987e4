package resp

import (
	"fmt"
	"testing"
)

// refScan is the frame guard's scan as first written, a byte at a time:
// the reference its faster form must match.
func refScan(g *frameGuard, p []byte) (int, error) {
	for i := 0; i < len(p); {
		c := p[i]
		switch g.state {
		case stStart:
			g.size, g.nhdr = 0, 0
			switch c {
			case '*':
				g.state = stArrayHeader
				g.hdr[0], g.nhdr = '*', 1
			case '\n':
				// An empty inline line: redcon skips it.
			default:
				g.state = stInline
			}
		case stInline:
			if c == '\n' {
				g.state = stStart
				g.done++
			}
		case stArrayHeader, stBulkHeader:
			if g.nhdr == 0 && g.state == stBulkHeader && c != '$' {
				return i, fmt.Errorf("Protocol error: expected '$', got %q", c)
			}
			if c != '\n' {
				if g.nhdr == len(g.hdr) {
					return i, fmt.Errorf("Protocol error: header line too long")
				}
				g.hdr[g.nhdr] = c
				g.nhdr++
				break
			}
			n, err := g.header()
			if err != nil {
				return i, err
			}
			g.nhdr = 0
			if g.state == stArrayHeader {
				// An element takes at least 6 bytes ("$0\r\n\r\n").
				if n > (g.max-g.size)/6 {
					return i, fmt.Errorf("Protocol error: an array of %d elements exceeds the command size limit of %d bytes", n, g.max)
				}
				g.left, g.state = n, stBulkHeader
			} else {
				if n > g.max {
					return i, fmt.Errorf("Protocol error: a bulk string of %d bytes exceeds the command size limit of %d bytes", n, g.max)
				}
				g.body, g.state = n+2, stBulkBody
			}
		case stBulkBody:
			k := min(g.body, int64(len(p)-i))
			g.size += k
			if g.size > g.max {
				return i, fmt.Errorf("Protocol error: command longer than the limit of %d bytes", g.max)
			}
			g.body -= k
			i += int(k)
			if g.body == 0 {
				if g.left--; g.left == 0 {
					g.state = stStart
					g.done++
				} else {
					g.state = stBulkHeader
				}
			}
			continue
		}
		g.size++
		if g.size > g.max {
			return i, fmt.Errorf("Protocol error: command longer than the limit of %d bytes", g.max)
		}
		i++
	}
	return len(p), nil
}

// FuzzFrameReference: the frame guard finds what its byte-at-a-time
// reference finds, in the same state, fed the same bytes cut anywhere.
func FuzzFrameReference(f *testing.F) {
	f.Add([]byte("*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n"), uint8(3), uint8(64))
	f.Add([]byte("*1\r\n$70\r\n"), uint8(1), uint8(64))
	f.Add([]byte("*99999999\r\n"), uint8(5), uint8(64))
	f.Add([]byte("PING\r\nECHO aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"), uint8(9), uint8(20))
	f.Add([]byte("*1\r\n$000000000000000000000000000001\r\nx\r\n"), uint8(7), uint8(200))
	f.Add([]byte("*1\r\n:1\r\n\n\n*1\n"), uint8(2), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, cut, max uint8) {
		got, want := frameGuard{max: int64(max)}, frameGuard{max: int64(max)}
		cutAt := int(cut) % (len(data) + 1)
		for _, part := range [][]byte{data[:cutAt], data[cutAt:]} {
			n1, err1 := got.scan(part)
			n2, err2 := refScan(&want, part)
			if n1 != n2 || fmt.Sprint(err1) != fmt.Sprint(err2) {
				t.Fatalf("%q cut at %d: %d, %v; reference %d, %v", data, cutAt, n1, err1, n2, err2)
			}
			if err1 != nil {
				return
			}
			if got != want {
				t.Fatalf("%q cut at %d: state %+v; reference %+v", data, cutAt, got, want)
			}
		}
	})
}

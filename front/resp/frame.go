package resp

import (
	"bytes"
	"fmt"
)

// frameGuard follows the bytes a client sends, command by command, ahead
// of the parser (conn.go), and refuses a command that would exceed the
// size cap before it is buffered: the parser grows its buffer until a
// command fits, and walks an announced array count element by element,
// so "*9999999999" alone would cost it unbounded memory or time. It only
// frames (counts headers and bodies); the parser parses.
type frameGuard struct {
	max   int64 // the cap on one command's encoded size
	state uint8
	hdr   [24]byte // the header line being read ("*3", "$5")
	nhdr  int
	left  int64 // array elements still to come
	body  int64 // bulk bytes still to come, CRLF included
	size  int64 // bytes of the current command so far
	// done counts the commands framed: a reader sees from it that a new
	// command began.
	done uint64
}

const (
	stStart = iota // between commands
	stInline
	stArrayHeader
	stBulkHeader
	stBulkBody
)

// mid reports whether a command has begun and not ended.
func (g *frameGuard) mid() bool { return g.state != stStart }

// scan follows p and returns how many of its bytes belong to commands
// within the cap, and the error that refuses the next one (nil when all
// of p is fine).
func (g *frameGuard) scan(p []byte) (int, error) {
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
				// An empty inline line: the parser skips it.
			default:
				g.state = stInline
			}
		case stInline:
			if c != '\n' {
				// The line up to its end at once.
				k := bytes.IndexByte(p[i:], '\n')
				if k < 0 {
					k = len(p) - i
				}
				if left := g.max - g.size; int64(k) > left {
					return i + int(left), fmt.Errorf("Protocol error: command longer than the limit of %d bytes", g.max)
				}
				g.size += int64(k)
				i += k
				continue
			}
			g.state = stStart
			g.done++
		case stArrayHeader, stBulkHeader:
			if g.nhdr == 0 && g.state == stBulkHeader && c != '$' {
				return i, fmt.Errorf("Protocol error: expected '$', got %q", c)
			}
			if c != '\n' {
				// The header up to its end at once, as far as it fits
				// in hdr and the cap.
				k := lineRun(p[i:])
				n := min(k, len(g.hdr)-g.nhdr)
				if left := g.max - g.size; int64(n) > left {
					n = int(left)
				}
				copy(g.hdr[g.nhdr:], p[i:i+n])
				g.nhdr += n
				g.size += int64(n)
				i += n
				switch {
				case n == k:
					continue
				case g.nhdr == len(g.hdr):
					return i, fmt.Errorf("Protocol error: header line too long")
				default:
					return i, fmt.Errorf("Protocol error: command longer than the limit of %d bytes", g.max)
				}
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

// lineRun is how many bytes of p come before its first line feed (all
// of them when it holds none). For a header's few bytes, a loop is
// quicker than bytes.IndexByte.
func lineRun(p []byte) int {
	for i, c := range p {
		if c == '\n' {
			return i
		}
	}
	return len(p)
}

// header parses the header line held (its type byte, digits, CR).
func (g *frameGuard) header() (int64, error) {
	h := g.hdr[:g.nhdr]
	if len(h) < 2 || h[len(h)-1] != '\r' {
		return 0, fmt.Errorf("Protocol error: header line without CRLF")
	}
	n, ok := parseDigits(h[1 : len(h)-1])
	if !ok || (n == 0 && h[0] == '*') {
		if h[0] == '*' {
			return 0, fmt.Errorf("Protocol error: invalid multibulk length")
		}
		return 0, fmt.Errorf("Protocol error: invalid bulk length")
	}
	return n, nil
}

// parseDigits parses a header's count as the parser does (strconv.Atoi: an
// optional sign, decimal digits), without allocating; a negative count or
// one of more than 18 digits is refused.
func parseDigits(b []byte) (int64, bool) {
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

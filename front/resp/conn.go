package resp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"unsafe"
)

// conn is one client connection: its bytes read and not yet run, the
// pipeline parsed from them, and its replies not yet written. One
// goroutine serves it, a pipeline at a time: every command the buffer
// holds whole is parsed, run and answered, the replies are written at
// once, and only then is the connection read again. Arguments are slices
// of the read buffer, valid until the next read (the commands copy what
// they keep), so a command costs no allocation of its own.
type conn struct {
	fc   *frameConn
	sess *session
	// buf[start:end] is read and not yet parsed.
	buf        []byte
	start, end int
	// argv holds the pipeline's arguments, ends where each command's end
	// in argv (reused from one pipeline to the next).
	argv [][]byte
	ends []int
	// out is the replies not yet written.
	out    []byte
	err    error // the last write's failure: later writes are skipped
	closed bool
}

const (
	// readBuffer is a connection's first read buffer; a command longer
	// than it grows the buffer, up to twice the command size cap.
	readBuffer = 4096
	// keepOut is the largest reply buffer kept after a write.
	keepOut = 256 << 10
)

// A protocol error is answered with its text and closes the connection
// (the parser's, for what the frame guard lets through).
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "Protocol error: " + e.msg }

var (
	errUnbalancedQuotes       = &protocolError{"unbalanced quotes in request"}
	errInvalidBulkLength      = &protocolError{"invalid bulk length"}
	errInvalidMultiBulkLength = &protocolError{"invalid multibulk length"}
)

// serve accepts connections from ln until it fails, serving each on its
// own goroutine; when it returns (Shutdown let it), the connections left
// are closed.
func (s *Server) serve(ln *frameListener) error {
	defer func() {
		ln.Listener.Close()
		s.mu.Lock()
		for fc := range s.conns {
			fc.Conn.Close()
		}
		s.mu.Unlock()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return nil
			}
			continue
		}
		fc := nc.(*frameConn)
		sess := s.accept(fc)
		if sess == nil {
			fc.Conn.Close()
			continue
		}
		go s.serveConn(&conn{fc: fc, sess: sess})
	}
}

// serveConn runs c's pipelines until it ends, then closes it.
func (s *Server) serveConn(c *conn) {
	err := s.loop(c)
	c.fc.Conn.Close()
	if err == io.EOF {
		err = nil
	}
	s.closed(c, err)
}

func (s *Server) loop(c *conn) error {
	c.buf = make([]byte, readBuffer)
	for {
		if err := c.parse(); err != nil {
			var perr *protocolError
			if errors.As(err, &perr) {
				c.out = append(c.out, "-ERR "...)
				c.out = append(c.out, perr.Error()...)
				c.out = append(c.out, '\r', '\n')
				c.flush()
			}
			return err
		}
		if len(c.ends) == 0 {
			if err := c.read(); err != nil {
				return err
			}
			continue
		}
		from := 0
		for i, to := range c.ends {
			s.handle(c, c.argv[from:to:to], i == len(c.ends)-1)
			from = to
		}
		clear(c.argv) // holds nothing of the read buffer
		c.argv, c.ends = c.argv[:0], c.ends[:0]
		if c.closed {
			return nil
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// read reads more of a command the buffer holds in part (or the next
// one), making room for it first.
func (c *conn) read() error {
	switch {
	case c.start == c.end:
		c.start, c.end = 0, 0
		if len(c.buf) > readBuffer {
			c.buf = make([]byte, readBuffer) // a long command's buffer is not kept
		}
	case c.end == len(c.buf) && c.start > 0:
		c.end = copy(c.buf, c.buf[c.start:c.end])
		c.start = 0
	case c.end == len(c.buf):
		// The frame guard bounds a command, and so this growth.
		b := make([]byte, 2*len(c.buf))
		c.end = copy(b, c.buf[c.start:c.end])
		c.start, c.buf = 0, b
	}
	n, err := c.fc.Read(c.buf[c.end:])
	if err != nil {
		return err
	}
	c.end += n
	return nil
}

// write queues a reply.
func (c *conn) write(b []byte) { c.out = append(c.out, b...) }

// flush writes the replies queued.
func (c *conn) flush() error {
	if c.err != nil {
		return c.err
	}
	if len(c.out) == 0 {
		return nil
	}
	_, c.err = c.fc.Write(c.out)
	if cap(c.out) > keepOut || c.err != nil {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return c.err
}

// close writes the replies queued and closes the connection; the rest of
// its pipeline is not run.
func (c *conn) close() {
	c.flush()
	c.closed = true
	c.fc.Conn.Close()
}

// parse parses every command buf[start:end] holds whole into argv and
// ends, leaving start at the first byte of the command held in part. A
// malformed command fails the whole buffer, none of it run.
//
// Its grammar and errors are redcon's (github.com/tidwall/redcon, whose
// parser limiterd used before): RESP arrays of bulk strings, and inline
// commands (words split on spaces, quoted with " or ', with \n, \r and
// \t escapes in quotes).
func (c *conn) parse() error {
	b := c.buf[c.start:c.end]
	for len(b) > 0 {
		var n int
		var err error
		if b[0] == '*' {
			n, err = c.parseArray(b)
		} else {
			n, err = c.parseInline(b)
		}
		if err != nil {
			clear(c.argv)
			c.argv, c.ends = c.argv[:0], c.ends[:0]
			return err
		}
		if n == 0 {
			break // the rest is to come
		}
		b = b[n:]
	}
	c.start = c.end - len(b)
	return nil
}

// parseArray parses the RESP array at b's start: the bytes it takes
// (0 when it is not whole yet).
func (c *conn) parseArray(b []byte) (int, error) {
	i := 1
	for i < len(b) && b[i] != '\n' {
		i++
	}
	if i == len(b) {
		return 0, nil
	}
	if b[i-1] != '\r' {
		return 0, errInvalidMultiBulkLength
	}
	count, ok := atoi(b[1 : i-1])
	if !ok || count <= 0 {
		return 0, errInvalidMultiBulkLength
	}
	from := len(c.argv)
	for range count {
		i++
		if i >= len(b) {
			break
		}
		if b[i] != '$' {
			return 0, &protocolError{"expected '$', got '" + string(b[i]) + "'"}
		}
		si := i
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if i == len(b) {
			break
		}
		if b[i-1] != '\r' {
			return 0, errInvalidBulkLength
		}
		size, ok := atoi(b[si+1 : i-1])
		if !ok || size < 0 {
			return 0, errInvalidBulkLength
		}
		if i+size+2 >= len(b) {
			break
		}
		if b[i+size+2] != '\n' || b[i+size+1] != '\r' {
			return 0, errInvalidBulkLength
		}
		c.argv = append(c.argv, b[i+1:i+1+size:i+1+size])
		i += size + 2
	}
	if len(c.argv)-from != count {
		clear(c.argv[from:])
		c.argv = c.argv[:from]
		return 0, nil
	}
	c.ends = append(c.ends, len(c.argv))
	return i + 1, nil
}

// parseInline parses the inline command at b's start, a line: the bytes
// it takes (0 when it is not whole yet). An empty line is taken and
// gives no command.
func (c *conn) parseInline(b []byte) (int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return 0, nil
	}
	line := b[:i]
	if i > 0 && b[i-1] == '\r' {
		line = b[:i-1]
	}
	from := len(c.argv)
	var quote, escape bool
	var quotech byte
outer:
	for {
		nline := make([]byte, 0, len(line))
		for j := 0; j < len(line); j++ {
			ch := line[j]
			if !quote {
				if ch == ' ' {
					if len(nline) > 0 {
						c.argv = append(c.argv, nline)
					}
					line = line[j+1:]
					continue outer
				}
				if ch == '"' || ch == '\'' {
					if j != 0 {
						return 0, errUnbalancedQuotes
					}
					quotech, quote = ch, true
					line = line[j+1:]
					continue outer
				}
			} else {
				if escape {
					escape = false
					switch ch {
					case 'n':
						ch = '\n'
					case 'r':
						ch = '\r'
					case 't':
						ch = '\t'
					}
				} else if ch == quotech {
					quote, quotech = false, 0
					c.argv = append(c.argv, nline)
					line = line[j+1:]
					if len(line) > 0 && line[0] != ' ' {
						return 0, errUnbalancedQuotes
					}
					continue outer
				} else if ch == '\\' {
					escape = true
					continue
				}
			}
			nline = append(nline, ch)
		}
		if quote {
			return 0, errUnbalancedQuotes
		}
		if len(line) > 0 {
			c.argv = append(c.argv, line[:len(line):len(line)])
		}
		break
	}
	if len(c.argv) > from {
		c.ends = append(c.ends, len(c.argv))
	}
	return i + 1, nil
}

// atoi parses a count as strconv.Atoi does, without allocating.
func atoi(b []byte) (int, bool) {
	n, err := strconv.Atoi(unsafe.String(unsafe.SliceData(b), len(b)))
	return n, err == nil
}

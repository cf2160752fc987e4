package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/tidwall/redcon"
)

// FuzzParse parses arbitrary bytes as one read's worth of pipeline, and
// finds what redcon's parser (which limiterd used before its own) finds:
// the same commands, or a protocol error with the same text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n", "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", "PING\r\n\r\n\nECHO a  b\n",
		`SET "a b" 'c\n' "x\ty"` + "\r\n", `ECHO "a"b` + "\n", `ECHO a"b"` + "\n", `ECHO "ab` + "\n", "*0\r\n", "*-1\r\n",
		"*1\n", "*1\r\n:1\r\n", "*1\r\n$-5\r\n", "*1\r\n$2\r\nabc\r\n", "*1\r\n$1\nx\r\n", "*+1\r\n$+1\r\nx\r\n",
		"*2\r\n$1\r\nx\r\n", "*3\r\n$3\r\nSET\r\n$0\r\n\r\n$1\r\n\x00\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return // redcon reads 4096 bytes at once
		}
		c := &conn{buf: data, end: len(data)}
		var got string
		if err := c.parse(); err != nil {
			var perr *protocolError
			if !errors.As(err, &perr) {
				t.Fatalf("%q: %v, not a protocol error", data, err)
			}
			got = err.Error()
		} else {
			from := 0
			for _, to := range c.ends {
				got += fmt.Sprintf("%q\n", c.argv[from:to])
				from = to
			}
		}
		if hugeCount(data) {
			return // redcon would walk it element by element: the frame guard refuses it first
		}
		var want string
		cmds, err := redcon.NewReader(bytes.NewReader(data)).ReadCommands()
		switch {
		case err == nil:
			for _, c := range cmds {
				want += fmt.Sprintf("%q\n", c.Args)
			}
		case err.Error() != "EOF":
			want = err.Error()
		}
		if got != want {
			t.Fatalf("%q: parsed\n%s\nredcon parses\n%s", data, got, want)
		}
	})
}

// hugeCount reports whether data may hold an array header of more
// elements than it has bytes.
func hugeCount(data []byte) bool {
	for i, c := range data {
		if c != '*' || (i > 0 && data[i-1] != '\n') {
			continue
		}
		j := i + 1
		for j < len(data) && data[j] != '\r' && data[j] != '\n' {
			j++
		}
		if n, err := strconv.Atoi(string(data[i+1 : j])); err == nil && n > len(data) {
			return true
		}
	}
	return false
}

package resp

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// TestPipelineBeyondMaxPendingRepliesAnswered: a pipeline whose replies
// pass MaxPendingReplies is answered in full: the replies written on the
// way do not end the connection.
func TestPipelineBeyondMaxPendingRepliesAnswered(t *testing.T) {
	_, addr := serveFront(t, newService(t, nil), Config{MaxPendingReplies: 64})
	c := dial(t, addr)
	r := bufio.NewReader(c)
	const n = 100 // 700 bytes of replies: ten writes of 64 bytes and more
	if _, err := io.WriteString(c, strings.Repeat("PING\r\n", n)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := readLine(t, c, r); got != "+PONG\r\n" {
			t.Fatalf("reply %d of %d: %q", i, n, got)
		}
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, c, r); got != "+PONG\r\n" {
		t.Fatalf("the connection after the pipeline: %q", got)
	}
}

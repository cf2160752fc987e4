package httpfront

import (
	"bufio"
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// TestTruncatedBody: a body that ends before its Content-Length (the
// client closed its side) is the client's error: 400, and no ERROR line in
// the log, which a client could otherwise flood.
func TestTruncatedBody(t *testing.T) {
	n, err := node.New([]node.Config{node.DefaultConfig()}, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	h, err := New(svc, WithLogger(slog.New(slog.NewJSONHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"key": "k"`
	if _, err := c.Write([]byte("POST " + APIPrefix + "Increment HTTP/1.1\r\nHost: limiterd\r\nContent-Type: application/json\r\n" +
		"Content-Length: 100\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a truncated body: %d; want 400", resp.StatusCode)
	}
	if strings.Contains(logged.String(), `"level":"ERROR"`) {
		t.Errorf("a truncated body is logged as an error: %s", logged.String())
	}
}

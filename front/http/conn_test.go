package httpfront

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
)

// serveBoth serves h's mux with net/http alone and through h.Listen,
// returning the two addresses.
func serveBoth(t testing.TB, h *Handler, m *reqmetrics.Metrics) (plain, fast string) {
	t.Helper()
	mux := http.NewServeMux()
	h.RegisterWithMetrics(mux, m)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	newSrv := func() *http.Server {
		return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	}
	a, b := listen(), listen()
	sa, sb := newSrv(), newSrv()
	fl := h.Listen(b, m, ServerTimeouts(sb))
	go sa.Serve(a)
	go sb.Serve(fl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sa.Shutdown(ctx)
		sb.Shutdown(ctx)
		fl.Shutdown(ctx)
	})
	return a.Addr().String(), b.Addr().String()
}

// exchange writes reqs on one connection to addr, then reads as many
// answers, with their Date masked.
func exchange(t *testing.T, addr string, reqs ...string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var out []string
	for _, r := range reqs {
		if _, err := io.WriteString(c, strings.ReplaceAll(r, "ADDR", addr)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			out = append(out, "error: "+err.Error())
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s\n", resp.Status)
		if d, err := http.ParseTime(resp.Header.Get("Date")); err != nil || time.Since(d) > time.Minute {
			fmt.Fprintf(&sb, "Date %q\n", resp.Header.Get("Date"))
		}
		resp.Header.Del("Date")
		resp.Header.Write(&sb)
		sb.Write(body)
		out = append(out, sb.String())
	}
	return out
}

func allowReq(body string, extra ...string) string {
	return fmt.Sprintf("POST /limiter.v1.RateLimiter/Allow HTTP/1.1\r\nHost: ADDR\r\n%sContent-Length: %d\r\n\r\n%s",
		strings.Join(extra, ""), len(body), body)
}

// TestListenerAnswersAsNetHTTP: through the Listener, every request (of
// the fast path's shape or not, on a connection that changes hands or
// not) is answered as net/http alone answers it, byte for byte but the
// Date, and recorded in the same metrics.
func TestListenerAnswersAsNetHTTP(t *testing.T) {
	h := newAuthHandler(t, fakeclock.New(time.Unix(1_700_000_000, 0)))
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil)
	plain, fast := serveBoth(t, h, m)
	bearer := "Authorization: Bearer " + testToken + "\r\n"
	ok := `{"key": "KEYY", "limits": [{"window_size": "60s", "limit": 2}]}`
	cases := [][]string{
		{allowReq(ok, bearer), allowReq(ok, bearer), allowReq(ok, bearer)},
		{allowReq(ok)},
		{allowReq(ok, "Authorization: Bearer wrong\r\n")},
		{allowReq(ok, bearer, bearer)},
		{allowReq(`{"key": "KEYY", "namespace": "nope", "limits": [{"window_size": "60s", "limit": 2}]}`, bearer)},
		{allowReq(`{"key": "KEYY", "limits": [{"window_size": "60s", "limit": -1}]}`, bearer)},
		{allowReq(`{"key": "KEYY", "limits": [{"window_size": "60s", "limit": 1, "x": 1}]}`, bearer)},
		{allowReq(`{"key": "KEYY"`, bearer)},
		{allowReq(ok, bearer), "GET /readyz HTTP/1.1\r\nHost: ADDR\r\n\r\n", allowReq(ok, bearer)},
		{allowReq(ok, bearer, "Connection: close\r\n")},
		{allowReq(ok, bearer, "Expect: 100-continue\r\n")},
		{strings.Replace(allowReq(ok, bearer), "HTTP/1.1", "HTTP/1.0", 1)},
		{strings.Replace(allowReq(ok, bearer), "Host: ADDR\r\n", "", 1)},
		{strings.Replace(allowReq(ok, bearer), "Allow", "Increment", 1)},
		{allowReq(ok, bearer) + allowReq(ok, bearer)[:40]},
		{"POST /limiter.v1.RateLimiter/Allow HTTP/1.1\r\nHost: ADDR\r\n" + bearer + "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"key\r\n0\r\n\r\n"},
	}
	for i, reqs := range cases {
		key := func(side string) []string {
			out := make([]string, len(reqs))
			for j, r := range reqs {
				out[j] = strings.ReplaceAll(r, "KEYY", fmt.Sprintf("%02d-%s", i, side))
			}
			return out
		}
		want := exchange(t, plain, key("x")...)
		got := exchange(t, fast, key("y")...)
		if strings.Join(got, "\n--\n") != strings.Join(want, "\n--\n") {
			t.Errorf("case %d: through the Listener\n%s\nwant, from net/http alone,\n%s", i, strings.Join(got, "\n--\n"), strings.Join(want, "\n--\n"))
		}
	}
	// Every call counted twice, once each way, by its code.
	// (A call is recorded once answered: wait for the last ones.)
	for _, code := range []string{"200", "400", "401", "403"} {
		labels := map[string]string{"method": "limiter.v1.RateLimiter/Allow", "code": code}
		got := metricstest.Sum(t, reg, "limiterd_requests_total", labels)
		for deadline := time.Now().Add(time.Second); int(got)%2 != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			got = metricstest.Sum(t, reg, "limiterd_requests_total", labels)
		}
		if got == 0 || int(got)%2 != 0 {
			t.Errorf("Allow %s: %v calls recorded, want an even count above 0", code, got)
		}
	}
}

// TestListenerShutdown: Shutdown closes the connections waiting for a
// request, and new connections are not served.
func TestListenerShutdown(t *testing.T) {
	h, _ := newTestAPI(t)
	mux := http.NewServeMux()
	h.Register(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	fl := h.Listen(ln, nil, ServerTimeouts(srv))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(fl) }()
	addr := ln.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, strings.ReplaceAll(allowReq(`{"key": "s", "limits": [{"window_size": "1s", "limit": 9}]}`), "ADDR", addr))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("before Shutdown: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	srv.Shutdown(ctx)
	fl.Shutdown(ctx)
	if err := <-served; err != http.ErrServerClosed {
		t.Errorf("Serve: %v, want ErrServerClosed", err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after Shutdown: read %v, want EOF", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the address still accepts connections")
	}
}

// FuzzListenerAgreesWithNetHTTP: whatever bytes a client sends, the
// Listener's answers are net/http's alone, byte for byte but the Date.
// Each side has its own service on the same fixed clock, so that both
// see the same counts.
func FuzzListenerAgreesWithNetHTTP(f *testing.F) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	plain, _ := serveBoth(f, newAuthHandler(f, clk), NewMetrics(nil, nil))
	_, fast := serveBoth(f, newAuthHandler(f, clk), NewMetrics(nil, nil))
	bearer := "Authorization: Bearer " + testToken + "\r\n"
	ok := `{"key": "k", "limits": [{"window_size": "60s", "limit": 2}]}`
	for _, s := range []string{
		allowReq(ok, bearer),
		allowReq(ok, bearer) + allowReq(ok, bearer),
		allowReq(ok),
		allowReq(`{"key": "k", "limits": [{"window_size": "60s", "limit": -1}]}`, bearer),
		allowReq(ok, bearer, "Content-Length: 3\r\n"),
		allowReq(ok, bearer, "Transfer-Encoding: chunked\r\n"),
		allowReq(ok, bearer, "X: a\rb\r\n"),
		strings.Replace(allowReq(ok, bearer), "Host: ADDR", "Host: a b", 1),
		strings.Replace(allowReq(ok, bearer), "\r\n", "\n", 2),
	} {
		f.Add([]byte(strings.ReplaceAll(s, "ADDR", "h")))
	}
	mask := regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)
	// A last request that closes the connection, so that both sides end
	// as soon as they have answered what came before.
	sentinel := "GET /readyz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
	f.Fuzz(func(t *testing.T, in []byte) {
		send := func(addr string) string {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write(append(in, sentinel...))
			out, _ := io.ReadAll(c)
			return mask.ReplaceAllString(string(out), "Date: -\r")
		}
		if got, want := send(fast), send(plain); got != want {
			t.Errorf("%q: through the Listener\n%q\nwant, from net/http alone,\n%q", in, got, want)
		}
	})
}

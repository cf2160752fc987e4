package resp

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
)

// minute is a Unix time on a minute boundary.
var minute = time.Unix(1_700_000_040, 0).UTC()

// testNamespaces: "default" as limiterd runs without a config, and "api"
// with sub-second windows and two policies: login (2 per hour) and trial
// (a fixed bucket of 1 per hour, in shadow mode).
func testNamespaces() []node.Config {
	return []node.Config{
		node.DefaultConfig(),
		{Name: "api", WindowSizes: []time.Duration{100 * time.Millisecond, time.Second, time.Hour}, Policies: map[string]ratelimit.Policy{
			"login": {Limits: []ratelimit.Limit{{Size: time.Hour, Limit: 2}}},
			"trial": {Limits: []ratelimit.Limit{{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Hour, Limit: 1}}}, Shadow: true},
		}},
	}
}

// newService serves testNamespaces on clock (nil: the system clock).
func newService(tb testing.TB, clock node.Clock) *service.Service {
	tb.Helper()
	n, err := node.New(testNamespaces(), clock)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}

// newTestServer is a front over svc without a listener, for the command
// layer.
func newTestServer(tb testing.TB, svc *service.Service, cfg Config) *Server {
	tb.Helper()
	s, err := New(svc, cfg, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// do runs one command line (split on spaces) in sess and returns the raw
// reply.
func (s *Server) do(sess *session, line string) string {
	var args [][]byte
	for _, f := range strings.Fields(line) {
		args = append(args, []byte(f))
	}
	sess.w.b = sess.w.b[:0]
	s.exec(context.Background(), sess, args)
	return string(sess.w.b)
}

// serveFront serves a front over svc on a loopback port and returns its
// address; the test's end shuts it down.
func serveFront(tb testing.TB, svc *service.Service, cfg Config) (*Server, string) {
	tb.Helper()
	s := newTestServer(tb, svc, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-errc; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

func newClock() *fakeclock.Clock { return fakeclock.New(minute) }

package grpcfront

import (
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	clustersync "github.com/limiterd/limiterd/sync"
)

// minute is a Unix time on a minute boundary (and so on a second one).
var minute = time.Unix(1_700_000_040, 0).UTC()

// testNamespaces are the namespaces the server tests run with:
// "default" as limiterd runs without a config, "api" with three sizes, and
// "tiny" capped at two active keys.
func testNamespaces() []node.Config {
	return []node.Config{
		node.DefaultConfig(),
		{Name: "api", WindowSizes: []time.Duration{100 * time.Millisecond, time.Second, time.Hour}},
		{Name: "tiny", WindowSizes: []time.Duration{time.Second, time.Minute}, MaxKeys: 2},
	}
}

// testServer is limiterd's gRPC API served in process over bufconn.
type testServer struct {
	node   *node.Node
	srv    *handler
	client limiterv1.RateLimiterClient
	conn   *grpc.ClientConn
}

// newTestServer serves the namespaces cfgs (none: testNamespaces) with
// NewServer over bufconn. clock nil means the system clock.
func newTestServer(tb testing.TB, clock node.Clock, cfgs ...node.Config) *testServer {
	return newSyncingTestServer(tb, clock, nil, cfgs...)
}

// newSyncingTestServer is newTestServer with the syncers syncers makes for
// the node.
func newSyncingTestServer(tb testing.TB, clock node.Clock, syncers func(*node.Node) []*clustersync.Syncer, cfgs ...node.Config) *testServer {
	tb.Helper()
	if len(cfgs) == 0 {
		cfgs = testNamespaces()
	}
	n, err := node.New(cfgs, clock)
	if err != nil {
		tb.Fatalf("node.New: %v", err)
	}
	var sys []*clustersync.Syncer
	if syncers != nil {
		sys = syncers(n)
	}
	svc, err := service.New(n, sys...)
	if err != nil {
		tb.Fatalf("service.New: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := NewServer(svc)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		tb.Fatalf("grpc.NewClient: %v", err)
	}
	tb.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return &testServer{node: n, srv: newHandler(svc), client: limiterv1.NewRateLimiterClient(conn), conn: conn}
}

func ts(t time.Time) *timestamppb.Timestamp    { return timestamppb.New(t) }
func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
func f64(v float64) *float64                   { return &v }

// rate is a WindowRate in test terms.
type rate struct {
	size time.Duration
	rate float64
}

func (r rate) String() string {
	return r.size.String() + "=" + strconv.FormatFloat(r.rate, 'g', -1, 64)
}

// sameFloat is exact equality except for a relative slack of 1e-12 (float
// division in the sliding formula).
func sameFloat(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}

func checkRates(tb testing.TB, what string, got []*limiterv1.WindowRate, want ...rate) {
	tb.Helper()
	ok := len(got) == len(want)
	gotR := make([]rate, len(got))
	for i, g := range got {
		gotR[i] = rate{g.GetWindowSize().AsDuration(), g.GetRate()}
		if ok && (gotR[i].size != want[i].size || !sameFloat(gotR[i].rate, want[i].rate)) {
			ok = false
		}
	}
	if !ok {
		tb.Errorf("%s: rates = %v, want %v", what, gotR, want)
	}
}

// rates reads key's rates in every window size of namespace at t (nil: now).
func (s *testServer) rates(tb testing.TB, namespace, key string, at *timestamppb.Timestamp) []rate {
	tb.Helper()
	resp, err := s.client.SlidingWindow(context.Background(), &limiterv1.SlidingWindowRequest{Namespace: namespace, Key: key, At: at})
	if err != nil {
		tb.Fatalf("SlidingWindow(%q, %q): %v", namespace, key, err)
	}
	out := make([]rate, len(resp.GetRates()))
	for i, r := range resp.GetRates() {
		out[i] = rate{r.GetWindowSize().AsDuration(), r.GetRate()}
	}
	return out
}

// checkUncounted fails unless key reads 0 in every window size of
// namespace.
func (s *testServer) checkUncounted(tb testing.TB, namespace, key string) {
	tb.Helper()
	for _, r := range s.rates(tb, namespace, key, nil) {
		if r.rate != 0 {
			tb.Errorf("%s/%q: rate %v after a rejected request, want 0", namespace, key, r)
		}
	}
}

// activeKeys sums the active keys of every namespace.
func (s *testServer) activeKeys() int64 {
	var n int64
	for _, ns := range s.node.Namespaces() {
		n += ns.Stats().ActiveKeys
	}
	return n
}

// checkStatus checks err's code, that its message is "field: reason" with
// reason holding every string of contains, and for INVALID_ARGUMENT that it
// carries exactly one errdetails.BadRequest field violation for field.
func checkStatus(tb testing.TB, err error, code codes.Code, field string, contains ...string) {
	tb.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		tb.Errorf("error = %v, want a status with code %v", err, code)
		return
	}
	if st.Code() != code {
		tb.Errorf("code = %v (%q), want %v", st.Code(), st.Message(), code)
	}
	reason, found := strings.CutPrefix(st.Message(), field+": ")
	if !found {
		tb.Errorf("message %q does not start with the field %q", st.Message(), field)
	}
	for _, c := range contains {
		if !strings.Contains(reason, c) {
			tb.Errorf("message %q does not contain %q", st.Message(), c)
		}
	}
	var violations []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			violations = append(violations, br.GetFieldViolations()...)
		}
	}
	if code != codes.InvalidArgument {
		if len(violations) != 0 {
			tb.Errorf("%v carries field violations %v, want none", code, violations)
		}
		return
	}
	if len(violations) != 1 || violations[0].GetField() != field || violations[0].GetDescription() != reason {
		tb.Errorf("field violations = %v, want one {field: %q, description: %q}", violations, field, reason)
	}
}

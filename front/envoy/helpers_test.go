package envoyfront

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// minute is a Unix time on a minute boundary (and so on a second one).
var minute = time.Unix(1_700_000_040, 0).UTC()

// daySizes are the window sizes of the units second to day.
var daySizes = []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}

// allSizes are the window sizes of every unit, week, month and year too.
var allSizes = append(slices.Clip(daySizes), 7*24*time.Hour, 30*24*time.Hour, 365*24*time.Hour)

// testServer is the front on limiterd's gRPC server, over bufconn, with a
// go-control-plane client.
type testServer struct {
	clock  *fakeclock.Clock
	srv    *Server
	reg    *prometheus.Registry
	client rlsv3.RateLimitServiceClient
	dir    string
}

// newTestServer serves the rules files files (name → YAML) with cfg
// (Dir and Namespace set here) on a clock at minute, in a namespace with
// the window sizes of the units second to day.
func newTestServer(t testing.TB, cfg Config, files map[string]string) *testServer {
	t.Helper()
	return newTestServerSizes(t, cfg, files, daySizes)
}

// newTestServerSizes is newTestServer in a namespace with window sizes
// sizes.
func newTestServerSizes(t testing.TB, cfg Config, files map[string]string, sizes []time.Duration) *testServer {
	t.Helper()
	clock := fakeclock.New(minute)
	ns := node.Config{Name: "envoy", WindowSizes: sizes}
	n, err := node.New([]node.Config{node.DefaultConfig(), ns}, clock)
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	dir := t.TempDir()
	for name, data := range files {
		writeFile(t, dir, name, data)
	}
	cfg.Dir, cfg.Namespace = dir, "envoy"
	reg := prometheus.NewRegistry()
	es, err := New(svc, cfg, nil, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpcfront.NewServer(svc)
	es.Register(gs.Server)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return &testServer{clock: clock, srv: es, reg: reg, client: rlsv3.NewRateLimitServiceClient(conn), dir: dir}
}

func writeFile(t testing.TB, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// call asks for hits of every descriptor of domain.
func (s *testServer) call(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

// stat is a descriptor status in test terms: code, limit per unit
// (0: none), remaining.
type stat struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func statusOf(st *rlsv3.RateLimitResponse_DescriptorStatus) stat {
	return stat{st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining()}
}

// check compares resp's overall code and statuses.
func check(t *testing.T, what string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, want ...stat) {
	t.Helper()
	if resp.GetOverallCode() != overall {
		t.Errorf("%s: overall code = %v, want %v", what, resp.GetOverallCode(), overall)
	}
	got := make([]stat, len(resp.GetStatuses()))
	for i, st := range resp.GetStatuses() {
		got[i] = statusOf(st)
	}
	if len(got) != len(want) {
		t.Errorf("%s: statuses = %+v, want %+v", what, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: statuses[%d] = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// counter reads the counter name with labels (0 when absent).
func (s *testServer) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(labels)
}

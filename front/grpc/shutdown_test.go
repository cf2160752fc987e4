package grpcfront

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// TestShutdownEndsWatchStreams: Shutdown reports NOT_SERVING to an open
// health Watch stream and ends it, rather than waiting for the client.
func TestShutdownEndsWatchStreams(t *testing.T) {
	n, err := node.New(testNamespaces(), nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	gs := NewServer(svc)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var watches []healthpb.Health_WatchClient
	for _, name := range []string{"", "unknown.Service"} {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	seen := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		var statuses []healthpb.HealthCheckResponse_ServingStatus
		for {
			resp, err := watches[0].Recv()
			if err != nil {
				seen <- statuses
				return
			}
			statuses = append(statuses, resp.GetStatus())
		}
	}()
	start := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	gs.Shutdown(sctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Shutdown with open Watch streams took %v, want under 2 s (watchDrain is %v)", took, watchDrain)
	}
	if statuses := <-seen; !slices.Contains(statuses, healthpb.HealthCheckResponse_NOT_SERVING) {
		t.Errorf("the watch saw %v, want NOT_SERVING", statuses)
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestLogInternal: an INTERNAL failure is logged with its namespace, its
// key only at debug; other failures are the caller's business.
func TestLogInternal(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		var buf bytes.Buffer
		d := &daemon{log: newLogger(&buf, "json", level)}
		info := &grpc.UnaryServerInfo{FullMethod: "/limiter.v1.RateLimiter/Allow"}
		req := &limiterv1.AllowRequest{Namespace: "api", Key: "secret-key"}
		for _, code := range []codes.Code{codes.InvalidArgument, codes.Internal} {
			_, err := d.logInternal(context.Background(), req, info, func(context.Context, any) (any, error) {
				return nil, status.Error(code, "boom")
			})
			if status.Code(err) != code {
				t.Fatalf("the interceptor changed the error: %v", err)
			}
		}
		out := buf.String()
		if strings.Count(out, "internal error") != 1 || !strings.Contains(out, `"namespace":"api"`) {
			t.Errorf("%s: log %q, want one line of the INTERNAL failure with its namespace", level, out)
		}
		if got := strings.Contains(out, "secret-key"); got != (level == "debug") {
			t.Errorf("%s: key logged = %v", level, got)
		}
	}
}

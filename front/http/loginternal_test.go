package httpfront

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLogInternal: a call answered INTERNAL is logged with its path;
// other failures are the caller's business.
func TestLogInternal(t *testing.T) {
	var buf bytes.Buffer
	h, err := New(nil, WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []codes.Code{codes.InvalidArgument, codes.Internal} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/limiter.v1.RateLimiter/Allow", nil)
		h.errorHandler(context.Background(), h.gw, h.marshal, w, r, status.Error(code, "boom"))
		if want := map[codes.Code]int{codes.InvalidArgument: 400, codes.Internal: 500}[code]; w.Code != want {
			t.Errorf("%v: status %d, want %d", code, w.Code, want)
		}
	}
	out := buf.String()
	if strings.Count(out, "internal error") != 1 || !strings.Contains(out, `"path":"/limiter.v1.RateLimiter/Allow"`) {
		t.Errorf("log %q, want one line of the INTERNAL failure with its path", out)
	}
}

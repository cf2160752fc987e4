package resp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/service"
)

// TestLogInternal: an error the front has no code for is answered
// INTERNAL and logged with its command, the arguments (which hold the
// key) only at debug; the other errors are the client's business.
func TestLogInternal(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		s := &Server{log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))}
		args := [][]byte{[]byte("RL.ALLOW"), []byte("secret-key")}
		for _, err := range []error{service.ErrUnavailable, errors.New("boom")} {
			var w reply
			writeErr(&w, err, nil)
			if w.internal != nil {
				s.logInternal(context.Background(), "rl.allow", args, w.internal)
			}
		}
		out := buf.String()
		if strings.Count(out, "internal error") != 1 || !strings.Contains(out, `"command":"rl.allow"`) || !strings.Contains(out, "boom") {
			t.Errorf("%v: log %q, want one line of the INTERNAL failure with its command", level, out)
		}
		if got := strings.Contains(out, "secret-key"); got != (level == slog.LevelDebug) {
			t.Errorf("%v: key logged = %v", level, got)
		}
	}
}

package resp

import (
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/service"
)

// TestWriteDecisionBindingLimit: an Allow's reply reports the limit with
// the least remaining, wherever it is in the request; on a tie, the first
// of them in request order.
func TestWriteDecisionBindingLimit(t *testing.T) {
	st := func(limit, remaining float64, reset time.Duration) service.LimitStatus {
		return service.LimitStatus{Limit: limit, Remaining: remaining, ResetAfter: reset}
	}
	tests := []struct {
		name    string
		limits  []service.LimitStatus
		binding int
	}{
		{"one limit", []service.LimitStatus{st(10, 4, time.Second)}, 0},
		{"the first", []service.LimitStatus{st(3, 1, time.Second), st(10, 9, time.Minute), st(100, 50, time.Hour)}, 0},
		{"the middle", []service.LimitStatus{st(10, 9, time.Second), st(3, 2, time.Minute), st(100, 4, time.Hour)}, 1},
		{"the last", []service.LimitStatus{st(10, 9, time.Second), st(30, 7, time.Minute), st(100, 0.5, time.Hour)}, 2},
		{"a tie: the first of it", []service.LimitStatus{st(10, 5, time.Second), st(3, 2, time.Minute), st(100, 2, time.Hour)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &reply{resp3: true}
			writeDecision(w, service.Decision{Allowed: true, Limits: tt.limits})
			b := tt.limits[tt.binding]
			want := fmt.Sprintf("%%6\r\n$7\r\nallowed\r\n#t\r\n$5\r\nnever\r\n#f\r\n$5\r\nlimit\r\n,%g\r\n$9\r\nremaining\r\n,%g\r\n"+
				"$14\r\nretry_after_ms\r\n:0\r\n$14\r\nreset_after_ms\r\n:%d\r\n", b.Limit, b.Remaining, b.ResetAfter.Milliseconds())
			if got := string(w.b); got != want {
				t.Errorf("reply = %q; want %q (limits[%d] binding)", got, want, tt.binding)
			}
		})
	}
}

package httpfront

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

var fastAllowSeeds = []string{
	`{"key": "bench", "limits": [{"window_size": "60s", "limit": 1e9}]}`,
	`{"namespace":"api","key":"k","cost":2.5,"countRejected":true,"policy":"login","limits":[{"windowSize":"1.5s","limit":10},{"window_size":"3600s","limit":0}]}`,
	`{"key": "k", "limits": [{"window_size": "0.000000001s", "limit": -0}]}`,
	`{"key": "k", "limits": []}`, `{}`, `{"key":"k","key":"j"}`, `{"key": "k\u0062"}`,
	`{"key": 1}`, `{"cost": "2"}`, `{"cost": 01}`, `{"cost": 1e400}`, `{"cost": -0.5e-3}`,
	`{"limits": [{"window_size": "60"}]}`, `{"limits": [{"window_size": "-1.5s"}]}`,
	`{"limits": [{"window_size": "1.0000000001s"}]}`, `{"limits": [{"token": {"max": 1}}]}`,
	`{"count_rejected": true, "countRejected": false}`, `{"key": "k"} x`, `[1]`, `{"key":"\xff"}`,
	`{"at": "2026-01-01T00:00:00Z"}`, `{"limits": [{"window_size": "315576000001s"}]}`,
	`{"limits": [{"limit": 1, "limit": 2}]}`, ` { "key" : "k" } `, `{"key": null}`,
}

// FuzzAllowFastDecodesAsTheGateway: a body the fast path takes decodes to
// the request the gateway's decoder makes of it; any body it takes, the
// gateway takes too (the rest goes to the gateway, errors and all).
func FuzzAllowFastDecodesAsTheGateway(f *testing.F) {
	for _, s := range fastAllowSeeds {
		f.Add([]byte(s))
	}
	m := newJSONMarshaler()
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast limiterv1.AllowRequest
		var lims [maxFastLimits]limiterv1.Limit
		var durs [maxFastLimits]durationpb.Duration
		if !decodeAllow(data, &fast, lims[:], durs[:], nil) {
			return
		}
		var want limiterv1.AllowRequest
		if err := m.UnmarshalOptions.Unmarshal(data, &want); err != nil {
			t.Fatalf("the fast path took %q, which the gateway refuses: %v", data, err)
		}
		if !proto.Equal(&fast, &want) {
			t.Fatalf("%q: the fast path decoded %v, the gateway %v", data, &fast, &want)
		}
	})
}

// TestAllowResponseWrittenAsTheGateway: the fast path's answer is the
// JSON the gateway's marshaler writes, value for value.
func TestAllowResponseWrittenAsTheGateway(t *testing.T) {
	m := newJSONMarshaler()
	for _, resp := range []*limiterv1.AllowResponse{
		{},
		{Allowed: true, WouldAllow: true, Limits: []*limiterv1.LimitStatus{{WindowSize: durationpb.New(60e9), Limit: 1e9, Rate: 1, Remaining: 999999999, ResetAfter: &durationpb.Duration{Seconds: 12, Nanos: 847178342}}}},
		{Never: true, Reason: "cost 2 exceeds \"the\" limit\n\x01 é", RetryAfter: &durationpb.Duration{Seconds: 3, Nanos: 500000000}, DryRun: true,
			Limits: []*limiterv1.LimitStatus{{Limit: 1e-7, Rate: 2.5e21, Remaining: math.Inf(1), Before: math.NaN()}, {Limit: -1, ResetAfter: &durationpb.Duration{Nanos: -1000}}}},
	} {
		want, err := m.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got := appendAllowResponse(nil, resp)
		var w, g any
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if !reflect.DeepEqual(w, g) {
			t.Errorf("fast path wrote\n%s\nthe gateway\n%s", got, want)
		}
	}
}

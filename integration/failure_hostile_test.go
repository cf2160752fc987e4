//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// hostileMaxKeys caps the active keys of the namespace "capped".
const hostileMaxKeys = 1000

func hostileConfig(st *failStore) string {
	return failConfig(st, st.addr) + fmt.Sprintf(`  - name: capped
    window_sizes: ["1m"]
    sync_rate: %v
    store: main
    max_keys: %d
`, failSyncRate.Seconds(), hostileMaxKeys)
}

// rawCodec sends requests as the bytes given, so that a test can send
// what a well-behaved client would refuse to encode, and decodes the
// responses as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// testHostileInput sends malformed and abusive requests to a real
// process: each gets a clear error, the process lives on, nothing is
// counted by a rejected request, and a flood of distinct keys past the
// cap leaves memory bounded.
func testHostileInput(t *testing.T, st *failStore) {
	n := harness.StartLimiterd(t, "node-0", hostileConfig(st))
	conn, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	at := time.Now()
	count := func(key string) float64 {
		t.Helper()
		r, err := nsRate(ctx, n, "api", key, at)
		if err != nil {
			t.Fatalf("SlidingWindow(%q): %v", key, err)
		}
		return r
	}
	inc := func(key string) *limiterv1.IncrementRequest {
		return &limiterv1.IncrementRequest{Namespace: "api", Key: key, At: timestamppb.New(at)}
	}
	codeOf := func(err error) codes.Code { return status.Code(err) }
	before := measureLive(t, n)

	// A message over the 16 MiB limit.
	_, err = n.Client.Increment(ctx, inc(strings.Repeat("k", 17<<20)))
	if codeOf(err) != codes.ResourceExhausted {
		t.Errorf("17 MiB request: %v, want ResourceExhausted", err)
	}
	report(t, "17 MiB request: %s", codeOf(err))

	// Batches over the item limit count nothing.
	items := make([]*limiterv1.IncrementRequest, 10_001)
	for i := range items {
		items[i] = inc("batch")
	}
	_, ierr := n.Client.IncrementBatch(ctx, &limiterv1.IncrementBatchRequest{Items: items})
	if codeOf(ierr) != codes.InvalidArgument {
		t.Errorf("IncrementBatch of 10001 items: %v, want InvalidArgument", ierr)
	}
	allows := make([]*limiterv1.AllowRequest, 10_001)
	for i := range allows {
		allows[i] = &limiterv1.AllowRequest{Namespace: "api", Key: "batch", At: timestamppb.New(at)}
	}
	_, aerr := n.Client.AllowBatch(ctx, &limiterv1.AllowBatchRequest{Items: allows})
	if codeOf(aerr) != codes.InvalidArgument {
		t.Errorf("AllowBatch of 10001 items: %v, want InvalidArgument", aerr)
	}
	if got := count("batch"); got != 0 {
		t.Errorf("rejected batches counted %v hits, want 0", got)
	}
	resp, err := n.Client.IncrementBatch(ctx, &limiterv1.IncrementBatchRequest{Items: items[:10_000]})
	if err != nil || len(resp.GetResults()) != 10_000 {
		t.Errorf("IncrementBatch of 10000 items: %d results, %v; want 10000 results", len(resp.GetResults()), err)
	} else if got := count("batch"); got != 10_000 {
		t.Errorf("a batch of 10000 counted %v hits, want 10000", got)
	}
	report(t, "batch of 10001: %s / %s; batch of 10000: accepted", codeOf(ierr), codeOf(aerr))

	// A key that is not UTF-8, which a protobuf client refuses to encode.
	raw := func(key string, extra ...byte) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, "api")
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, key)
		return append(b, extra...)
	}
	var out limiterv1.IncrementResponse
	err = conn.Invoke(ctx, limiterv1.RateLimiter_Increment_FullMethodName, raw("bad\xff\xfekey"), &out, grpc.ForceCodec(rawCodec{}))
	if c := codeOf(err); (c != codes.InvalidArgument && c != codes.Internal) || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8 key: %v, want an error naming UTF-8", err)
	}
	report(t, "invalid UTF-8 key: %s (%s)", codeOf(err), status.Convert(err).Message())

	// Unknown fields are skipped: the request counts once.
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 1000, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 7)
	unknown = protowire.AppendTag(unknown, 1001, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("future"))
	err = conn.Invoke(ctx, limiterv1.RateLimiter_Increment_FullMethodName, raw("unknown", unknown...), &out, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Errorf("request with unknown fields: %v, want them ignored", err)
	} else if got := count("unknown"); got != 1 {
		t.Errorf("request with unknown fields counted %v, want 1", got)
	}
	report(t, "unknown fields: %s (ignored)", codeOf(err))

	// A flood of distinct keys past the namespace's cap.
	const flood = 50_000
	var admitted, refused, other int
	for lo := 0; lo < flood; lo += 10_000 {
		batch := make([]*limiterv1.IncrementRequest, 10_000)
		for i := range batch {
			batch[i] = &limiterv1.IncrementRequest{Namespace: "capped", Key: fmt.Sprintf("flood-%d-%s", lo+i, strings.Repeat("x", 200))}
		}
		resp, err := n.Client.IncrementBatch(ctx, &limiterv1.IncrementBatchRequest{Items: batch})
		if err != nil {
			t.Fatalf("flood batch: %v", err)
		}
		for _, r := range resp.GetResults() {
			switch {
			case r.GetError() == nil:
				admitted++
			case codes.Code(r.GetError().GetCode()) == codes.ResourceExhausted:
				refused++
			default:
				other++
			}
		}
	}
	_, err = n.Client.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "capped", Key: "one-more"})
	if codeOf(err) != codes.ResourceExhausted {
		t.Errorf("a new key past the cap: %v, want ResourceExhausted", err)
	}
	if admitted != hostileMaxKeys || refused != flood-hostileMaxKeys || other != 0 {
		t.Errorf("flood of %d distinct keys: %d admitted, %d refused (ResourceExhausted), %d other errors; want %d admitted",
			flood, admitted, refused, other, hostileMaxKeys)
	}
	// The admitted keys reach the store (memory is bounded by the cap, not
	// by what the store has taken).
	waitUntil(t, "the capped keys pushed", storeWait, func() bool {
		return pushed(t, n, "capped") >= hostileMaxKeys
	})
	after := measureLive(t, n)
	if !n.Running() {
		t.Fatal("limiterd died")
	}
	active := mustMetric(t, n, `limiterd_active_keys{limiter_namespace="capped"}`)
	refusedMetric := mustMetric(t, n, `limiterd_keys_refused_total{limiter_namespace="capped"}`)
	if active != hostileMaxKeys || refusedMetric < flood-hostileMaxKeys {
		t.Errorf("after the flood: limiterd_active_keys %v, limiterd_keys_refused_total %v; want %d and at least %d",
			active, refusedMetric, hostileMaxKeys, flood-hostileMaxKeys)
	}
	// Live heap after collections: the 1000 admitted keys, a fraction of a
	// MiB; the 49,000 refused ones (some 10 MiB of keys) must not stay.
	if after.heapMiB > before.heapMiB+8 {
		t.Errorf("heap grew from %v to %v after the hostile requests", before, after)
	}
	if _, err := n.Client.Increment(ctx, inc("still-serving")); err != nil {
		t.Errorf("after the hostile requests: %v", err)
	}
	report(t, "flood of %d distinct keys (max_keys %d): %d admitted, %d ResourceExhausted, %v keys held; before %v, after %v",
		flood, hostileMaxKeys, admitted, refused, active, before, after)
}

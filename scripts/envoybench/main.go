// Command envoybench is the helper of scripts/envoybench.sh: it writes the
// gRPC frame of one ShouldRateLimit request for h2load (-d), and checks that
// a server answers Envoy's rate limit service as expected.
//
//	go run ./scripts/envoybench frame -domain bench -key user -value u1 -o request.bin
//	go run ./scripts/envoybench check -addr 127.0.0.1:8081 -domain bench -key user -value u1 -over tight
//
// frame writes the gRPC length-prefixed message: one byte 0 (not
// compressed), the message's length as 4 bytes big-endian, then the
// serialized RateLimitRequest with one descriptor (key, value).
//
// check sends that request through a gRPC client and expects OK, then one
// with descriptor (over, x) and hits_addend 3 (its limit is below 3) and
// expects OVER_LIMIT; it exits non-zero otherwise.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

func request(domain, key, value string, hits uint32) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
		HitsAddend: hits,
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: envoybench frame|check [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	domain := fs.String("domain", "bench", "domain")
	key := fs.String("key", "user", "descriptor key")
	value := fs.String("value", "u1", "descriptor value")
	out := fs.String("o", "request.bin", "frame: output file")
	addr := fs.String("addr", "127.0.0.1:8081", "check: server's gRPC address")
	over := fs.String("over", "", "check: a descriptor key whose limit is below 3 (empty: skip the OVER_LIMIT check)")
	_ = fs.Parse(os.Args[2:])

	switch os.Args[1] {
	case "frame":
		msg, err := proto.Marshal(request(*domain, *key, *value, 0))
		if err != nil {
			fail(err)
		}
		frame := make([]byte, 5, 5+len(msg))
		binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
		if err := os.WriteFile(*out, append(frame, msg...), 0o644); err != nil {
			fail(err)
		}
	case "check":
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail(err)
		}
		defer conn.Close()
		c := rlsv3.NewRateLimitServiceClient(conn)
		call := func(req *rlsv3.RateLimitRequest, want rlsv3.RateLimitResponse_Code) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.ShouldRateLimit(ctx, req)
			if err != nil {
				fail(fmt.Errorf("%s: %v", *addr, err))
			}
			if resp.GetOverallCode() != want {
				fail(fmt.Errorf("%s: %s: got %s, want %s (%v)", *addr, req.GetDescriptors()[0].GetEntries()[0].GetKey(), resp.GetOverallCode(), want, resp))
			}
			fmt.Printf("%s %s=%s hits %d: %s\n", *addr, req.GetDescriptors()[0].GetEntries()[0].GetKey(),
				req.GetDescriptors()[0].GetEntries()[0].GetValue(), max(req.GetHitsAddend(), 1), resp.GetOverallCode())
		}
		call(request(*domain, *key, *value, 0), rlsv3.RateLimitResponse_OK)
		if *over != "" {
			call(request(*domain, *over, "x", 3), rlsv3.RateLimitResponse_OVER_LIMIT)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: envoybench frame|check [flags]")
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "envoybench:", err)
	os.Exit(1)
}

// Command grpcframe writes one gRPC message frame (a zero byte, the
// message's length as 4 big-endian bytes, the message) for a limiter.v1
// request given as JSON, so that a load tool such as h2load can send it
// as a request body:
//
//	go run ./scripts/grpcframe -type limiter.v1.AllowRequest \
//		-json '{"key": "k", "limits": [{"window_size": "60s", "limit": 1e9}]}' > allow.bin
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/limiterd/limiterd/api/proto/limiter/v1" // registers limiter.v1
)

func main() {
	typ := flag.String("type", "", "full name of the message, e.g. limiter.v1.AllowRequest")
	js := flag.String("json", "{}", "the message in protobuf's JSON mapping")
	flag.Parse()
	if err := run(*typ, *js); err != nil {
		fmt.Fprintln(os.Stderr, "grpcframe:", err)
		os.Exit(1)
	}
}

func run(typ, js string) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typ))
	if err != nil {
		return fmt.Errorf("-type %q: %w", typ, err)
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	frame := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(b)))
	_, err = os.Stdout.Write(append(frame, b...))
	return err
}

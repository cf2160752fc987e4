package client

import (
	"context"

	"google.golang.org/grpc"
)

// WithBearerToken sends token with every call, batches included, as
// limiterd's authorization expects ("authorization: Bearer <token>"). It
// is sent over plaintext connections too: give TLS credentials with
// WithDialOptions wherever the network is not trusted.
func WithBearerToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearer{"Bearer " + token}))
}

// bearer is a token as gRPC per-call credentials.
type bearer struct{ value string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.value}, nil
}

// RequireTransportSecurity is false: limiterd on loopback or inside a
// mesh is served in plaintext.
func (bearer) RequireTransportSecurity() bool { return false }

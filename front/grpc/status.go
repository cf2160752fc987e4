package grpcfront

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limiterd/limiterd/service"
)

// toStatus maps the service's errors to gRPC statuses, the only place
// codes are chosen; every INVALID_ARGUMENT names its field.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var fe *service.FieldError
	if !errors.As(err, &fe) {
		switch {
		case errors.Is(err, service.ErrUnauthenticated):
			return status.Error(codes.Unauthenticated, err.Error())
		case errors.Is(err, service.ErrPermissionDenied):
			return status.Error(codes.PermissionDenied, err.Error())
		}
		if errors.Is(err, service.ErrUnavailable) {
			return status.Error(codes.Unavailable, err.Error())
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Internal, err.Error())
	}
	code := codes.InvalidArgument
	switch {
	case errors.Is(err, service.ErrUnknownNamespace):
		code = codes.NotFound
	case errors.Is(err, service.ErrKeyLimit):
		code = codes.ResourceExhausted
	case errors.Is(err, service.ErrFailedPrecondition):
		code = codes.FailedPrecondition
	}
	st := status.New(code, fe.Error())
	if code == codes.InvalidArgument {
		if ds, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Reason}}}); derr == nil {
			st = ds
		}
	}
	return st.Err()
}

// ToStatus maps the service's errors to gRPC statuses as the gRPC server
// does, for fronts that report errors as google.rpc.Status (front/http).
func ToStatus(err error) error { return toStatus(err) }

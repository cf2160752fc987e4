package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/limiterd/limiterd/service"
)

// writeErr writes err as an error reply: the one place the front chooses
// error codes. A request error names its argument, as the gRPC front's
// INVALID_ARGUMENT names its field; rename maps the service's field names
// to the command's argument names (the single limit of a bucket command
// is "limits[0]" to the service).
//
//	ERR          the request is invalid (the field, then why)
//	NOTFOUND     no such namespace
//	KEYLIMIT     the namespace holds as many keys as it may
//	PRECONDITION the namespace's mode or store cannot serve the request
//	UNAVAILABLE  the store a synchronous call needs cannot be reached
//	NOAUTH       authorization is on and the connection has no principal
//	NOPERM       the principal is not granted the command in the namespace
//	TIMEOUT      the call was canceled or ran out of time
//	INTERNAL     anything else
func writeErr(w *reply, err error, rename func(string) string) {
	var fe *service.FieldError
	if !errors.As(err, &fe) {
		switch {
		case errors.Is(err, service.ErrUnauthenticated):
			w.error(errNoAuthReply)
		case errors.Is(err, service.ErrPermissionDenied):
			w.error("NOPERM " + err.Error())
		case errors.Is(err, service.ErrUnavailable):
			w.error("UNAVAILABLE " + err.Error())
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			w.error("TIMEOUT " + err.Error())
		default:
			w.error("INTERNAL " + err.Error())
			w.internal = err
		}
		return
	}
	code := "ERR "
	switch {
	case errors.Is(err, service.ErrUnknownNamespace):
		code = "NOTFOUND "
	case errors.Is(err, service.ErrKeyLimit):
		code = "KEYLIMIT "
	case errors.Is(err, service.ErrFailedPrecondition):
		code = "PRECONDITION "
	}
	field := fe.Field
	if rename != nil {
		field = rename(field)
	}
	w.error(code + field + ": " + fe.Reason)
}

// bucketField renames a bucket command's field f: "limits[0].<kind>.x"
// is x, then renamed by rename (the command's argument names).
func bucketField(f string, rename func(string) string) string {
	if rest, ok := strings.CutPrefix(f, "limits[0]."); ok {
		if i := strings.IndexByte(rest, '.'); i >= 0 {
			rest = rest[i+1:]
		}
		f = rest
	}
	return rename(f)
}

// commonFields are the fields every RL.* command renames.
func commonFields(f string) string {
	if f == "namespace" {
		return "NS"
	}
	return f
}

// invalid is a request error found while parsing arguments.
func invalid(field, reason string) error {
	return &service.FieldError{Field: field, Reason: reason, Err: service.ErrInvalidValue}
}

// errNoAuthReply answers a command that needs a principal on a
// connection without one.
const errNoAuthReply = "NOAUTH Authentication required: AUTH with a configured token, or a configured client certificate."

// syntaxError is an argument list the command does not read; it says
// what was wrong, after Redis's "ERR syntax error".
type syntaxError string

func (e syntaxError) Error() string { return "ERR syntax error: " + string(e) }

// syntaxErrorf is a syntaxError of format and args.
func syntaxErrorf(format string, args ...any) error { return syntaxError(fmt.Sprintf(format, args...)) }

// logInternal logs a command answered INTERNAL. Its arguments, which hold
// the key, are logged at debug only.
func (s *Server) logInternal(ctx context.Context, name string, args [][]byte, err error) {
	attrs := []any{"command", name, "err", err}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		a := make([]string, 0, len(args)-1)
		for _, b := range args[1:] {
			a = append(a, clip(b))
		}
		attrs = append(attrs, "args", a)
	}
	s.log.Error("command failed with an internal error", attrs...)
}

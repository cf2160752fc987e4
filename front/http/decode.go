package httpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/service"
)

// body is a request's body, where its decoder leaves why it refused it,
// for the error handler: the gateway keeps only the message of a decoding
// error.
type body struct {
	io.ReadCloser
	err error // an *http.MaxBytesError or a *service.FieldError
}

// jsonMarshaler is the gateway's JSON marshaler with a decoder that names
// the field it refuses. Unknown fields are refused, as a misspelt
// optional field would otherwise be silently ignored.
type jsonMarshaler struct {
	runtime.JSONPb
}

func newJSONMarshaler() *jsonMarshaler {
	return &jsonMarshaler{JSONPb: runtime.JSONPb{
		MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true},
	}}
}

func (m *jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		b, _ := r.(*body)
		data, err := io.ReadAll(r)
		if err != nil {
			if b != nil {
				b.err = &readError{err}
			}
			return err
		}
		if len(data) == 0 {
			// Not io.EOF, which the gateway takes for an empty request: the
			// documented body is required.
			return errNoBody
		}
		msg, ok := v.(proto.Message)
		if !ok {
			return m.JSONPb.Unmarshal(data, v)
		}
		if err := m.UnmarshalOptions.Unmarshal(data, msg); err != nil {
			if notJSON := jsonShape(data); notJSON != nil {
				return notJSON
			}
			md := msg.ProtoReflect().Descriptor()
			field, want := m.refusedField(data, md)
			if field == "" {
				field = duplicateField(err, md)
			}
			if field == "" || b == nil {
				return fmt.Errorf("the request body is a JSON object but not a valid request: %s", protoReason(err))
			}
			b.err = &service.FieldError{Field: strings.ToValidUTF8(field, "\uFFFD"), Reason: shapeReason(err, want), Err: service.ErrInvalidValue}
			return err
		}
		return nil
	})
}

// jsonShape says what is wrong with a body that is not valid JSON (and
// at which byte), or not a JSON object; nil when it is a JSON object.
func jsonShape(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			if se.Error() == "unexpected end of JSON input" {
				return fmt.Errorf("the request body is not valid JSON: it ends (at byte offset %d) before its JSON value does", len(data))
			}
			// Offset counts the bytes read, the offending one included.
			return fmt.Errorf("the request body is not valid JSON: %s at byte offset %d", se.Error(), se.Offset-1)
		}
		return fmt.Errorf("the request body is not valid JSON: %v", err)
	}
	if _, ok := v.(map[string]any); ok {
		return nil
	}
	at := len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
	return fmt.Errorf("the request body is JSON but not an object: %s at byte offset %d; a request is a JSON object ({} for an empty request)", jsonKind(v), at)
}

// jsonKind names the kind of a decoded JSON value.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "an object"
}

// duplicateField is the field protojson refused as given twice (its
// error names its JSON name), by its name when it is one of md's.
func duplicateField(err error, md protoreflect.MessageDescriptor) string {
	_, name, ok := strings.Cut(err.Error(), `duplicate field "`)
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, `"`)
	fd := md.Fields().ByJSONName(name)
	if fd == nil {
		fd = md.Fields().ByTextName(name)
	}
	if fd != nil {
		name = string(fd.Name())
	}
	return name
}

// shapeReason is why a field was refused: protojson's reason, its
// position last and "syntax error" dropped (the JSON is valid, its shape
// is not), and what the field takes (want; "" for a field unknown or
// given twice).
func shapeReason(err error, want string) string {
	r := protoReason(err)
	r = strings.TrimPrefix(r, "syntax error ")
	if rest, ok := strings.CutPrefix(r, "(line "); ok {
		if pos, tail, ok := strings.Cut(rest, "): "); ok {
			line, col, _ := strings.Cut(pos, ":")
			r = tail + " (line " + line + ", column " + col + ")"
		}
	}
	if want == "" {
		return r
	}
	return "wrong JSON for this field, which takes " + want + ": " + r
}

// fieldKind says what JSON a field takes.
func fieldKind(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "an object"
	case fd.IsList():
		return "an array"
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "a base64 string"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.EnumKind:
		return "an enum value's name"
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return `a duration string such as "1.5s"`
		case "google.protobuf.Timestamp":
			return `an RFC 3339 time string such as "2024-01-02T15:04:05Z"`
		case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
			"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
			return "a number"
		}
		return "an object"
	}
	return "a number"
}

// refusedField returns the path of the field of the JSON object data (a
// message md) that the decoder refuses, in the service's terms
// ("limits[0].window_size"), and what JSON it takes ("" for an unknown
// field), or "" when no one field is to blame. It decodes the fields one
// at a time, only after the whole request was refused.
func (m *jsonMarshaler) refusedField(data []byte, md protoreflect.MessageDescriptor) (string, string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return "", ""
	}
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fd := md.Fields().ByJSONName(name)
		if fd == nil {
			fd = md.Fields().ByTextName(name)
		}
		if fd == nil {
			return name, "" // unknown
		}
		one, _ := json.Marshal(map[string]json.RawMessage{name: obj[name]})
		if m.UnmarshalOptions.Unmarshal(one, dynamicpb.NewMessage(md)) == nil {
			continue
		}
		field := string(fd.Name())
		sub := fd.Message()
		if sub == nil || strings.HasPrefix(string(sub.FullName()), "google.protobuf.") || fd.IsMap() {
			return field, fieldKind(fd)
		}
		if !fd.IsList() {
			if p, want := m.refusedField(obj[name], sub); p != "" {
				return field + "." + p, want
			}
			return field, fieldKind(fd)
		}
		var items []json.RawMessage
		if json.Unmarshal(obj[name], &items) == nil {
			for i, it := range items {
				if p, want := m.refusedField(it, sub); p != "" {
					return fmt.Sprintf("%s[%d].%s", field, i, p), want
				}
				var o map[string]json.RawMessage
				if json.Unmarshal(it, &o) != nil {
					return fmt.Sprintf("%s[%d]", field, i), "an object"
				}
			}
		}
		return field, fieldKind(fd)
	}
	return "", ""
}

// errNoBody refuses an empty body.
var errNoBody = errors.New("the request body is required: a JSON object ({} for an empty request)")

// protoReason is a protojson error without its "proto:" prefix (followed
// by a space or a no-break space), made valid UTF-8.
func protoReason(err error) string {
	return strings.ToValidUTF8(strings.TrimLeftFunc(strings.TrimPrefix(err.Error(), "proto:"), unicode.IsSpace), "\uFFFD")
}

// readError is a failure to read the request body: the client's (it
// closed its side before sending the whole body, or the connection broke).
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// reason says why, for a request of Content-Length n (-1: unknown).
func (e *readError) reason(n int64) string {
	if errors.Is(e.err, io.ErrUnexpectedEOF) {
		if n >= 0 {
			return fmt.Sprintf("it ended before its Content-Length of %d bytes", n)
		}
		return "it ended before its last chunk"
	}
	return e.err.Error()
}

// errorHandler is the gateway's, with the refusals of the decoder made
// what they are: a body too large (413), or a field the service's way
// (400 with a google.rpc.BadRequest naming it).
func (h *Handler) errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if b, ok := r.Body.(*body); ok && b.err != nil {
		var tooBig *http.MaxBytesError
		var re *readError
		_, isStatus := status.FromError(b.err)
		switch {
		case errors.As(b.err, &tooBig):
			err = tooLarge()
		case isStatus:
			err = b.err // the handler's own refusal (bytes in flight)
		case errors.As(b.err, &re):
			// The client's failure, not the server's: 400, not logged.
			err = status.Errorf(codes.InvalidArgument, "the request body could not be read: %s", re.reason(r.ContentLength))
		default:
			err = grpcfront.ToStatus(b.err)
		}
	}
	// A decoding error quotes the body, which may not be UTF-8: a status
	// message that is not cannot be encoded.
	if st, ok := status.FromError(err); ok && !utf8.ValidString(st.Message()) {
		p := st.Proto()
		p.Message = strings.ToValidUTF8(p.Message, "\uFFFD")
		err = status.ErrorProto(p)
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		w = bearerChallenge{w}
	case codes.Internal:
		if h.log != nil {
			h.log.Error("call failed with an internal error", "path", r.URL.Path, "err", err)
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// bearerChallenge answers a 401 with the challenge of RFC 6750: the
// gateway would send the status message as WWW-Authenticate.
type bearerChallenge struct{ http.ResponseWriter }

func (w bearerChallenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="limiterd"`)
	}
	w.ResponseWriter.WriteHeader(code)
}

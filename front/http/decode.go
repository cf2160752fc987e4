package httpfront

import (
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
				b.err = err
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
			if field := m.refusedField(data, msg.ProtoReflect().Descriptor()); field != "" && b != nil {
				b.err = &service.FieldError{Field: strings.ToValidUTF8(field, "\uFFFD"), Reason: protoReason(err), Err: service.ErrInvalidValue}
			}
			return err
		}
		return nil
	})
}

// refusedField returns the path of the field of the JSON object data (a
// message md) that the decoder refuses, in the service's terms
// ("limits[0].window_size"), or "" when no one field is to blame. It
// decodes the fields one at a time, only after the whole request was
// refused.
func (m *jsonMarshaler) refusedField(data []byte, md protoreflect.MessageDescriptor) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return ""
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
			return name // unknown
		}
		one, _ := json.Marshal(map[string]json.RawMessage{name: obj[name]})
		if m.UnmarshalOptions.Unmarshal(one, dynamicpb.NewMessage(md)) == nil {
			continue
		}
		field := string(fd.Name())
		sub := fd.Message()
		if sub == nil || strings.HasPrefix(string(sub.FullName()), "google.protobuf.") || fd.IsMap() {
			return field
		}
		if !fd.IsList() {
			if p := m.refusedField(obj[name], sub); p != "" {
				return field + "." + p
			}
			return field
		}
		var items []json.RawMessage
		if json.Unmarshal(obj[name], &items) == nil {
			for i, it := range items {
				if p := m.refusedField(it, sub); p != "" {
					return fmt.Sprintf("%s[%d].%s", field, i, p)
				}
			}
		}
		return field
	}
	return ""
}

// errNoBody refuses an empty body.
var errNoBody = errors.New("the request body is required: a JSON object ({} for an empty request)")

// protoReason is a protojson error without its "proto:" prefix (followed
// by a space or a no-break space), made valid UTF-8.
func protoReason(err error) string {
	return strings.ToValidUTF8(strings.TrimLeftFunc(strings.TrimPrefix(err.Error(), "proto:"), unicode.IsSpace), "\uFFFD")
}

// errorHandler is the gateway's, with the refusals of the decoder made
// what they are: a body too large (413), or a field the service's way
// (400 with a google.rpc.BadRequest naming it).
func (h *Handler) errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if b, ok := r.Body.(*body); ok && b.err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(b.err, &tooBig) {
			err = tooLarge()
		} else {
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

package httpfront

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// fastAllowMax bounds the bodies the Allow fast path reads: the common
// request is a few hundred bytes; a larger one goes through the gateway.
const fastAllowMax = 4 << 10

// maxFastLimits is how many limits the fast path decodes in place.
const maxFastLimits = 8

type fastBuf struct{ b []byte }

func newFastBuf() any { return &fastBuf{b: make([]byte, fastAllowMax)} }

var jsonContentType = []string{"application/json"}

// serveAllowFast serves an Allow whose body is in the common shape
// without the gateway's transcoding: namespace, key, cost, policy,
// count_rejected and sliding-window limits, as plain strings and numbers.
// Anything else (another field, a bucket limit, an escape, a duplicate, a
// body that is not such an object) goes to the gateway with the same
// bytes, which answers it, and every error, as before.
func (h *Handler) serveAllowFast(w http.ResponseWriter, r *http.Request, rc io.ReadCloser) {
	in := h.bufs.Get().(*fastBuf)
	defer h.bufs.Put(in)
	data := in.b[:r.ContentLength]
	n, err := io.ReadFull(rc, data)
	if err != nil || !decodeAndServe(h, w, r, data) {
		r.Body = &body{ReadCloser: io.NopCloser(io.MultiReader(bytes.NewReader(data[:n]), rc))}
		h.gw.ServeHTTP(w, r)
	}
}

// decodeAndServe serves the call when data is of the fast path's shape.
func decodeAndServe(h *Handler, w http.ResponseWriter, r *http.Request, data []byte) bool {
	resp, ok, err := h.callAllow(r.Context(), data)
	if !ok {
		return false
	}
	if err != nil {
		h.errorHandler(r.Context(), h.gw, h.marshal, w, r, err)
		return true
	}
	out := h.bufs.Get().(*fastBuf)
	out.b = appendAllowResponse(out.b[:0], resp)
	w.Header()["Content-Type"] = jsonContentType
	w.Write(out.b)
	h.bufs.Put(out)
	return true
}

// callAllow calls Allow when data is of the fast path's shape (ok), not
// otherwise.
func (h *Handler) callAllow(ctx context.Context, data []byte) (resp *limiterv1.AllowResponse, ok bool, err error) {
	var req limiterv1.AllowRequest
	var lims [maxFastLimits]limiterv1.Limit
	var durs [maxFastLimits]durationpb.Duration
	var ptrs [maxFastLimits]*limiterv1.Limit
	if !decodeAllow(data, &req, lims[:], durs[:], ptrs[:0]) {
		return nil, false, nil
	}
	resp, err = h.rls.Allow(ctx, &req)
	return resp, true, err
}

// decodeAllow fills req from data when data is a JSON object of the
// common shape, reporting false otherwise (not why: the gateway says).
func decodeAllow(data []byte, req *limiterv1.AllowRequest, lims []limiterv1.Limit, durs []durationpb.Duration, ptrs []*limiterv1.Limit) bool {
	s := scanner{b: data}
	var seen uint8
	var cost float64
	okAll := s.object(func(name []byte) bool {
		var bit uint8
		ok := false
		switch string(name) {
		case "namespace":
			bit = 1
			req.Namespace, ok = s.str()
		case "key":
			bit = 2
			req.Key, ok = s.str()
		case "cost":
			bit = 4
			cost, ok = s.num()
			req.Cost = &cost
		case "countRejected", "count_rejected":
			bit = 8
			req.CountRejected, ok = s.boolean()
		case "policy":
			bit = 16
			req.Policy, ok = s.str()
		case "limits":
			bit = 32
			ok = s.array(func() bool {
				i := len(ptrs)
				if i == len(lims) || !decodeLimit(&s, &lims[i], &durs[i]) {
					return false
				}
				ptrs = append(ptrs, &lims[i])
				return true
			})
			req.Limits = ptrs
		}
		if !ok || seen&bit != 0 {
			return false // unknown, malformed or repeated: the gateway's
		}
		seen |= bit
		return true
	})
	return okAll && s.end()
}

// decodeLimit decodes a sliding-window limit: window_size and limit.
func decodeLimit(s *scanner, l *limiterv1.Limit, dur *durationpb.Duration) bool {
	var seen uint8
	return s.object(func(name []byte) bool {
		var bit uint8
		ok := false
		switch string(name) {
		case "windowSize", "window_size":
			bit = 1
			var v []byte
			if v, ok = s.raw(); ok {
				ok = parseDuration(v, dur)
				l.WindowSize = dur
			}
		case "limit":
			bit = 2
			l.Limit, ok = s.num()
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
}

// parseDuration parses protojson's duration form, seconds with up to nine
// decimals and an "s" ("60s", "0.25s"), within its range.
func parseDuration(v []byte, d *durationpb.Duration) bool {
	if len(v) < 2 || v[len(v)-1] != 's' {
		return false
	}
	v = v[:len(v)-1]
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	i := 0
	var secs int64
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if secs > 315_576_000_000/10 {
			return false
		}
		secs = secs*10 + int64(v[i]-'0')
	}
	if i == 0 || i > 1 && v[0] == '0' || secs > 315_576_000_000 {
		return false
	}
	var nanos int32
	if i < len(v) {
		if v[i] != '.' || len(v)-i-1 < 1 || len(v)-i-1 > 9 {
			return false
		}
		digits := 0
		for i++; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return false
			}
			nanos = nanos*10 + int32(v[i]-'0')
			digits++
		}
		for ; digits < 9; digits++ {
			nanos *= 10
		}
	}
	if neg {
		secs, nanos = -secs, -nanos
	}
	d.Seconds, d.Nanos = secs, nanos
	return true
}

// scanner reads the strict subset of JSON the fast path takes.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) take(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// object reads {"name": value, ...}, calling field for each name with the
// scanner at its value.
func (s *scanner) object(field func(name []byte) bool) bool {
	if !s.take('{') {
		return false
	}
	if s.take('}') {
		return true
	}
	for {
		name, ok := s.raw()
		if !ok || !s.take(':') || !field(name) {
			return false
		}
		if s.take('}') {
			return true
		}
		if !s.take(',') {
			return false
		}
	}
}

func (s *scanner) array(elem func() bool) bool {
	if !s.take('[') {
		return false
	}
	if s.take(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.take(']') {
			return true
		}
		if !s.take(',') {
			return false
		}
	}
}

// raw reads a string without escapes or control characters, in valid
// UTF-8, and returns its bytes.
func (s *scanner) raw() ([]byte, bool) {
	if !s.take('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (s *scanner) str() (string, bool) {
	v, ok := s.raw()
	return string(v), ok
}

func (s *scanner) boolean() (bool, bool) {
	s.ws()
	switch {
	case bytes.HasPrefix(s.b[s.i:], []byte("true")):
		s.i += 4
		return true, true
	case bytes.HasPrefix(s.b[s.i:], []byte("false")):
		s.i += 5
		return false, true
	}
	return false, false
}

// num reads a JSON number (RFC 8259's grammar) that is a finite float64.
func (s *scanner) num() (float64, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return 0, false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return 0, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	return f, err == nil && !math.IsInf(f, 0)
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// appendAllowResponse appends resp as the gateway's marshaler writes it
// (protojson with default values emitted), without its random spaces.
func appendAllowResponse(b []byte, resp *limiterv1.AllowResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, resp.GetAllowed())
	b = append(b, `,"limits":[`...)
	for i, l := range resp.GetLimits() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if l.GetWindowSize() != nil {
			b = append(b, `"windowSize":`...)
			b = appendDuration(b, l.GetWindowSize())
			b = append(b, ',')
		}
		b = append(b, `"limit":`...)
		b = appendFloat(b, l.GetLimit())
		b = append(b, `,"rate":`...)
		b = appendFloat(b, l.GetRate())
		b = append(b, `,"remaining":`...)
		b = appendFloat(b, l.GetRemaining())
		if l.GetResetAfter() != nil {
			b = append(b, `,"resetAfter":`...)
			b = appendDuration(b, l.GetResetAfter())
		}
		b = append(b, `,"before":`...)
		b = appendFloat(b, l.GetBefore())
		b = append(b, '}')
	}
	b = append(b, ']')
	if resp.GetRetryAfter() != nil {
		b = append(b, `,"retryAfter":`...)
		b = appendDuration(b, resp.GetRetryAfter())
	}
	b = append(b, `,"never":`...)
	b = strconv.AppendBool(b, resp.GetNever())
	b = append(b, `,"reason":`...)
	b = appendString(b, resp.GetReason())
	b = append(b, `,"dryRun":`...)
	b = strconv.AppendBool(b, resp.GetDryRun())
	b = append(b, `,"wouldAllow":`...)
	b = strconv.AppendBool(b, resp.GetWouldAllow())
	return append(b, '}')
}

// appendFloat writes a double as protojson does: "NaN" and the
// infinities as strings, exponents outside [1e-6, 1e21).
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}

// appendDuration writes a duration as protojson does: seconds with 0, 3,
// 6 or 9 decimals and an "s", in quotes.
func appendDuration(b []byte, d *durationpb.Duration) []byte {
	secs, nanos := d.GetSeconds(), d.GetNanos()
	b = append(b, '"')
	if secs < 0 || nanos < 0 {
		b = append(b, '-')
		secs, nanos = -secs, -nanos
	}
	b = strconv.AppendInt(b, secs, 10)
	if nanos != 0 {
		var frac [9]byte
		for i := 8; i >= 0; i-- {
			frac[i] = byte('0' + nanos%10)
			nanos /= 10
		}
		n := 9
		for n > 3 && string(frac[n-3:n]) == "000" {
			n -= 3
		}
		b = append(b, '.')
		b = append(b, frac[:n]...)
	}
	return append(b, 's', '"')
}

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[r>>4], "0123456789abcdef"[r&15])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

package node

import (
	"errors"
	"fmt"
	"math"

	"github.com/limiterd/limiterd/ratelimit"
)

// Sentinel errors. Each is wrapped in a *ratelimit.FieldError naming the
// offending field, or returned wrapped with %w.
var (
	ErrInvalidWindow    = errors.New("node: invalid window size")
	ErrUnknownWindow    = errors.New("node: window size not configured")
	ErrInvalidConfig    = errors.New("node: invalid namespace config")
	ErrUnknownNamespace = errors.New("node: unknown namespace")
	ErrKeyLimit         = errors.New("node: active key limit reached")
)

// fieldErr builds the error of a bad field.
func fieldErr(field string, sentinel error, format string, args ...any) error {
	return &ratelimit.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// fromMicro converts micro-hits to hits.
func fromMicro(m int64) float64 { return float64(m) / ratelimit.Micro }

// wholeMicro is ratelimit.ToMicro's common case, inline: v in range and a
// whole number of micro-hits, which needs no rounding (ok false: call
// ToMicro). Every Allow converts its cost and each limit, and the call
// costs more than the conversion.
func wholeMicro(v float64) (m int64, ok bool) {
	x := v * ratelimit.Micro
	m = int64(x)
	return m, float64(m) == x && math.Abs(v) <= ratelimit.MaxValue
}

// checkKeyLen is the part of ratelimit.ValidateKey the counting paths run
// on every call; they check UTF-8 only for keys not yet stored, which
// saves a pass over the key's bytes on every hit of an existing key.
func checkKeyLen(key string) error {
	if key == "" || len(key) > ratelimit.MaxKeyLen {
		return ratelimit.ValidateKey(key)
	}
	return nil
}

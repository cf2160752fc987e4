// Package ratelimit holds the words of a rate limit that the node, the
// service, its fronts, the config and the stores share: limits of each
// kind, an Allow's request and decision, rates, the field errors of bad
// input, and the arithmetic every store repeats (window starts, the
// sliding-window formula, micro-hits).
package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Sentinel errors, each wrapped in a *FieldError naming the field.
var (
	ErrInvalidKey   = errors.New("ratelimit: invalid key")
	ErrInvalidValue = errors.New("ratelimit: invalid value")
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
)

// Micro is the number of micro-hits in one hit. Counts are kept everywhere as
// int64 micro-hits so that sums are exact and identical on every node.
const Micro = 1_000_000

// MaxValue is the largest |value| one call may count, in hits.
const MaxValue = 1e9

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 1024

// FieldError says which request or config field was wrong and why.
type FieldError struct {
	Field  string
	Reason string
	Err    error // one of the sentinels above
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, sentinel error, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// ToMicro converts a hit value to micro-hits, rounding half away from zero.
// NaN, infinities and |v| > MaxValue are rejected with a *FieldError
// naming the field "value".
func ToMicro(v float64) (int64, error) { return ToMicroField("value", v) }

// ToMicroField is ToMicro for a value given in another request field
// ("cost", "cur_diff"): its error names that field.
func ToMicroField(field string, v float64) (int64, error) {
	if !(math.Abs(v) <= MaxValue) { // also true for NaN
		return 0, errValue(field, v)
	}
	// Whole numbers of micro-hits (every whole hit) need no rounding.
	x := v * Micro
	if m := int64(x); float64(m) == x {
		return m, nil
	}
	return roundMicro(x), nil
}

func roundMicro(x float64) int64 { return int64(math.Round(x)) }

// errValue builds ToMicro's error, out of the way of the valid case.
func errValue(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(field, ErrInvalidValue, "must be a finite number, got %v", v)
	}
	return fieldErr(field, ErrInvalidValue, "|value| must be at most %g, got %g", float64(MaxValue), v)
}

// fromMicro converts micro-hits to hits.
func fromMicro(m int64) float64 { return float64(m) / Micro }

// ValidateKey checks a key: non-empty valid UTF-8 of at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	if err := checkKeyLen(key); err != nil {
		return err
	}
	if !utf8.ValidString(key) {
		return errKeyUTF8()
	}
	return nil
}

// checkKeyLen is the part of ValidateKey the counting paths run on every
// call; they check UTF-8 only for keys not yet stored, which saves a pass
// over the key's bytes on every hit of an existing key.
func checkKeyLen(key string) error {
	switch {
	case key == "":
		return fieldErr("key", ErrInvalidKey, "must not be empty")
	case len(key) > MaxKeyLen:
		return fieldErr("key", ErrInvalidKey, "must be at most %d bytes, got %d", MaxKeyLen, len(key))
	}
	return nil
}

func errKeyUTF8() error { return fieldErr("key", ErrInvalidKey, "must be valid UTF-8") }

// WindowStart returns the epoch-aligned start (Unix ns) of the window of the
// given size holding t (Unix ns): floor(t / size) * size.
func WindowStart(t int64, size time.Duration) int64 {
	s := int64(size)
	q := t / s
	if t%s < 0 {
		q--
	}
	return q * s
}

// SlidingRate applies the sliding-window formula in micro-hits:
// cur + prev × (size − pos) / size, where pos = t − start(cur) is measured in
// nanoseconds.
func SlidingRate(cur, prev int64, size time.Duration, pos int64) float64 {
	if prev == 0 {
		return float64(cur)
	}
	return float64(cur) + float64(prev)*float64(int64(size)-pos)/float64(size)
}

// FormatDuration writes d as the config and the JSON API write durations:
// whole seconds as seconds ("60s", not Go's "1m0s"), shorter ones in
// milliseconds ("250ms"), anything else in Go's syntax ("1.5s").
func FormatDuration(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0 && d > -time.Second && d < time.Second:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

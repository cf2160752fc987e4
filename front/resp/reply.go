package resp

import (
	"math"
	"strconv"
)

// reply appends one connection's replies, in RESP2 or RESP3: the types
// that differ between them (maps, doubles, booleans, null) are written as
// the connection's protocol asks, so a command writes each reply once.
type reply struct {
	b      []byte
	resp3  bool
	errors int // error replies written, for the metrics
	// internal is the last INTERNAL error written, for the log.
	internal error
}

func (w *reply) line(prefix byte, s string) {
	w.b = append(w.b, prefix)
	w.b = append(w.b, s...)
	w.b = append(w.b, '\r', '\n')
}

func (w *reply) header(prefix byte, n int64) {
	w.b = append(w.b, prefix)
	w.b = strconv.AppendInt(w.b, n, 10)
	w.b = append(w.b, '\r', '\n')
}

// simple writes a status reply (+OK); s must hold no CR or LF.
func (w *reply) simple(s string) { w.line('+', s) }

// error writes an error reply; msg starts with its code (ERR, NOAUTH...)
// and its line breaks are replaced, as a RESP error is one line.
func (w *reply) error(msg string) {
	w.errors++
	w.b = append(w.b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.b = append(w.b, c)
	}
	w.b = append(w.b, '\r', '\n')
}

func (w *reply) int(n int64) { w.header(':', n) }

func (w *reply) bulk(s string) {
	w.header('$', int64(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, '\r', '\n')
}

func (w *reply) bulkBytes(s []byte) {
	w.header('$', int64(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, '\r', '\n')
}

func (w *reply) array(n int) { w.header('*', int64(n)) }

// mapHeader starts a map of n pairs: a RESP3 map, or in RESP2 an array of
// 2n elements, key then value (as Redis answers HGETALL and HELLO).
func (w *reply) mapHeader(n int) {
	if w.resp3 {
		w.header('%', int64(n))
		return
	}
	w.header('*', int64(2*n))
}

// null is RESP3's null or RESP2's null bulk string.
func (w *reply) null() {
	if w.resp3 {
		w.b = append(w.b, '_', '\r', '\n')
		return
	}
	w.b = append(w.b, "$-1\r\n"...)
}

// bool is RESP3's boolean or RESP2's integer 1 or 0.
func (w *reply) bool(v bool) {
	if w.resp3 {
		if v {
			w.b = append(w.b, "#t\r\n"...)
		} else {
			w.b = append(w.b, "#f\r\n"...)
		}
		return
	}
	if v {
		w.b = append(w.b, ":1\r\n"...)
	} else {
		w.b = append(w.b, ":0\r\n"...)
	}
}

// double is RESP3's double or, in RESP2, a bulk string holding it (as
// Redis answers ZSCORE): the shortest text that reads back to v.
func (w *reply) double(v float64) {
	if w.resp3 {
		w.b = append(w.b, ',')
		w.b = appendFloat(w.b, v)
		w.b = append(w.b, '\r', '\n')
		return
	}
	var tmp [32]byte
	s := appendFloat(tmp[:0], v)
	w.header('$', int64(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, '\r', '\n')
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	case math.IsNaN(v):
		return append(b, "nan"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// verbatim is RESP3's verbatim text (INFO's reply) or RESP2's bulk
// string.
func (w *reply) verbatim(s string) {
	if !w.resp3 {
		w.bulk(s)
		return
	}
	w.header('=', int64(len(s)+4))
	w.b = append(w.b, "txt:"...)
	w.b = append(w.b, s...)
	w.b = append(w.b, '\r', '\n')
}

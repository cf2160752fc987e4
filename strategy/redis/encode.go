package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	clustersync "github.com/limiterd/limiterd/sync"
)

// The encoders of the scripts' calls and the decoders of their replies.
// Every position comes from the records of layout.go, which the scripts'
// headers share.
//
// A synchronous call's cost is mostly what the client allocates, so the
// strings of a call (hash keys, fields, rows) are built in one buffer and
// cut from one string, and every argument goes in as a pointer: a
// number or string boxed on its own would cost an allocation.

// argv is a script call's ARGV: numbers held in ints and strings in strs,
// each passed by pointer.
type argv struct {
	args []any
	ints []int64
	strs []string
}

func newArgv(n int) *argv { return &argv{args: make([]any, n), ints: make([]int64, n)} }

// int sets ARGV[i] to v.
func (a *argv) int(i int, v int64) {
	a.ints[i] = v
	a.args[i] = &a.ints[i]
}

// str returns where ARGV[i], a string, is to be written.
func (a *argv) str(i int) *string {
	if a.strs == nil {
		a.strs = make([]string, len(a.args))
	}
	a.args[i] = &a.strs[i]
	return &a.strs[i]
}

// strs builds strings in one buffer and then cuts them from one string:
// any number of strings for one allocation.
type strs struct {
	b    []byte
	dsts []*string
	ends []int
}

func newStrs(size, n int) *strs {
	return &strs{b: make([]byte, 0, size), dsts: make([]*string, 0, n), ends: make([]int, 0, n)}
}

// cut ends the string appended to b since the last cut; done writes it
// to *dst.
func (s *strs) cut(dst *string) {
	s.dsts = append(s.dsts, dst)
	s.ends = append(s.ends, len(s.b))
}

// done writes every string to its destination.
func (s *strs) done() {
	all := string(s.b)
	lo := 0
	for i, dst := range s.dsts {
		*dst, lo = all[lo:s.ends[i]], s.ends[i]
	}
}

// appendFields appends key's sum field and its row field under row
// prefix rp, each cut to its destination.
func (s *strs) appendFields(rp, key string, sum, row *string) {
	s.b = append(append(s.b, sumPrefix...), key...)
	s.cut(sum)
	s.b = append(append(s.b, rp...), key...)
	s.cut(row)
}

// appendRow appends a stored row "<total>:<version>:<expiry>".
func appendRow(b []byte, total, version, exp int64) []byte {
	b = strconv.AppendInt(b, total, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, exp, 10)
}

// expireArg is r's expiry as the scripts take it: Unix ms, rounded up,
// 0 for none.
func expireArg(r *clustersync.Row) int64 {
	if r.ExpireAt.IsZero() {
		return 0
	}
	ms := r.ExpireAt.UnixMilli()
	if r.ExpireAt.Nanosecond()%1_000_000 != 0 {
		ms++
	}
	return ms
}

// The push script's reply flag, shared by every call.
var withReply, noReply = "1", "0"

// pushCall is one call of the push script: hashes [h0, h1) of a grouping,
// rows order[j0:j1] (the first and last hash may be cut).
type pushCall struct{ h0, h1, j0, j1 int }

// encodePush encodes call c of rows grouped by g, for row prefix *rp,
// asking for a reply per row when reply is set. Each hash's rows go in
// groups (pushGroup) of one version and expiry.
func encodePush(g *grouping, c pushCall, rp *string, rows []clustersync.Row, reply bool) scriptCall {
	groups := 0
	for h := c.h0; h < c.h1; h++ {
		for lo, hi := max(g.first[h], c.j0), min(g.first[h+1], c.j1); lo < hi; groups++ {
			lo = groupEnd(g, rows, lo, hi)
		}
	}
	a := newArgv(int(pushHeadWidth) + groups*int(pushGroupWidth) + (c.j1-c.j0)*int(pushRowWidth))
	a.args[pushHeadRowPrefix] = rp
	a.args[pushHeadReply] = &noReply
	if reply {
		a.args[pushHeadReply] = &withReply
	}
	at := int(pushHeadWidth)
	for h := c.h0; h < c.h1; h++ {
		for lo, hi := max(g.first[h], c.j0), min(g.first[h+1], c.j1); lo < hi; {
			end, r := groupEnd(g, rows, lo, hi), &rows[g.order[lo]]
			a.int(at+int(pushGroupHash), int64(h-c.h0+1))
			a.int(at+int(pushGroupRows), int64(end-lo))
			a.int(at+int(pushGroupVersion), r.Version)
			a.int(at+int(pushGroupExpire), expireArg(r))
			at += int(pushGroupWidth)
			for ; lo < end; lo++ {
				r := &rows[g.order[lo]]
				a.args[at+int(pushRowKey)] = &r.Key
				a.int(at+int(pushRowTotal), r.Total)
				at += int(pushRowWidth)
			}
		}
	}
	return scriptCall{keys: g.hashes[c.h0:c.h1], args: a.args}
}

// groupEnd returns the end of the push group of grouped rows that starts
// at order[lo] and ends by order[hi]: the rows that share its version and
// expiry.
func groupEnd(g *grouping, rows []clustersync.Row, lo, hi int) int {
	first := &rows[g.order[lo]]
	v, exp := first.Version, expireArg(first)
	end := lo + 1
	for end < hi && rows[g.order[end]].Version == v && expireArg(&rows[g.order[end]]) == exp {
		end++
	}
	return end
}

// encodeKey encodes the key script's call for rows, distinct windows of
// one (namespace, key), under key prefix and row prefix rp.
func encodeKey(prefix, rp string, rows []clustersync.Row) scriptCall {
	first := &rows[0]
	keys := make([]string, len(rows))
	a := newArgv(keyWindow(0).at(len(rows)))
	s := newStrs(len(rows)*(hashKeyLen(prefix, first.Namespace)+3*20+2)+1+2*len(first.Key)+len(rp), len(keys)+2+len(rows))
	hk := newKeyHasher(prefix, first.Namespace, first.Key)
	for i := range rows {
		s.b = hk.appendKey(s.b, rows[i].Size, rows[i].Start)
		s.cut(&keys[i])
	}
	s.appendFields(rp, first.Key, a.str(int(keyHeadSumField)), a.str(int(keyHeadRowField)))
	for i := range rows {
		r := &rows[i]
		exp := expireArg(r)
		s.b = appendRow(s.b, r.Total, r.Version, exp)
		s.cut(a.str(keyWindowRow.at(i)))
		a.int(keyWindowTotal.at(i), r.Total)
		a.int(keyWindowVersion.at(i), r.Version)
		a.int(keyWindowExpire.at(i), exp)
	}
	s.done()
	return scriptCall{keys: keys, args: a.args}
}

// decodeRows writes into others[i] the others' sum of row i of a push or
// key script's reply of n rows.
func decodeRows(reply []int64, n int, others []int64) error {
	if len(reply) != rowReplySum.at(n) {
		return fmt.Errorf("unexpected reply %v for %d rows", reply, n)
	}
	for i := range others {
		others[i] = reply[rowReplySum.at(i)] - reply[rowReplyOwn.at(i)]
	}
	return nil
}

// others1 returns a window's sum minus one incarnation's total, from the
// sum field and the incarnation's row as stored ("" for none).
func others1(sum, row string) (int64, error) {
	own, _, _ := strings.Cut(row, ":")
	s, err1 := parseInt(sum)
	o, err2 := parseInt(own)
	return s - o, errors.Join(err1, err2)
}

func parseInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected stored number %q", s)
	}
	return n, nil
}

package redis

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

var allowGroupScript = newScript("allowgroup")

// AllowGroup decides req's entries in order in one script call, as
// clustersync.GroupAllower specifies: the store's one Allow script (a
// single Allow is a group of one). All rows of req must be windows of
// one (namespace, key): on a cluster they then share a hash slot.
func (s *Store) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: allow group: %w", clustersync.ErrClosed)
	}
	nw := len(req.Windows)
	if len(allowed) != len(req.Entries) || len(others) != nw {
		return fmt.Errorf("redis: allow group: len(allowed) = %d, len(others) = %d, want %d, %d",
			len(allowed), len(others), len(req.Entries), nw)
	}
	if nw == 0 {
		for i := range allowed {
			allowed[i] = true
		}
		return nil
	}
	for _, w := range req.Windows {
		if w.Size <= 0 {
			return fmt.Errorf("redis: allow group: window size must be positive, got %s", w.Size)
		}
	}
	call := encodeAllowGroup(s.prefix, s.rowPrefix(req.Inc), req)
	reply, err := allowGroupScript.Run(ctx, scripter{s.c}, call.keys, call.args...).Int64Slice()
	if err != nil {
		return s.fail("allow group", err)
	}
	if len(reply) != groupReplyCurSum.at(nw)+len(allowed) {
		return fmt.Errorf("redis: allow group: unexpected reply %v for %d windows and %d entries", reply, nw, len(allowed))
	}
	for w := range others {
		others[w] = [2]int64{
			reply[groupReplyCurSum.at(w)] - reply[groupReplyCurOwn.at(w)],
			reply[groupReplyPrevSum.at(w)] - reply[groupReplyPrevOwn.at(w)],
		}
	}
	for i := range allowed {
		allowed[i] = reply[groupReplyCurSum.at(nw)+i] == 1
	}
	return nil
}

// encodeAllowGroup encodes the allowgroup script's call for req, whose
// rows are windows of one (namespace, key), under key prefix and row
// prefix rp.
func encodeAllowGroup(prefix, rp string, req *clustersync.GroupAllowRequest) scriptCall {
	nw, ne := len(req.Windows), len(req.Entries)
	first := &req.Windows[0].Cur
	keys := make([]string, groupKeysWidth.at(nw-1))
	a := newArgv(groupEntryCost.entryAt(nw, ne))
	s := newStrs(2*nw*hashKeyLen(prefix, first.Namespace)+1+2*len(first.Key)+len(rp)+nw*(3*20+2), len(keys)+2+nw)
	hk := newKeyHasher(prefix, first.Namespace, first.Key)
	for i := range req.Windows {
		w := &req.Windows[i]
		s.b = hk.appendKey(s.b, w.Cur.Size, w.Cur.Start)
		s.cut(&keys[groupKeysCur.at(i)])
		s.b = hk.appendKey(s.b, w.Prev.Size, w.Prev.Start)
		s.cut(&keys[groupKeysPrev.at(i)])
	}
	s.appendFields(rp, first.Key, a.str(int(groupHeadSumField)), a.str(int(groupHeadRowField)))
	var costs int64
	for i := range req.Entries {
		costs += req.Entries[i].Cost
	}
	for i := range req.Windows {
		w := &req.Windows[i]
		a.int(groupWindowSize.at(i), int64(w.Size))
		a.int(groupWindowPos.at(i), req.At-w.Cur.Start)
		a.int(groupWindowCurTotal.at(i), w.Cur.Total)
		a.int(groupWindowCurAll.at(i), w.Cur.Total+costs)
		a.int(groupWindowCurVersion.at(i), w.Cur.Version)
		a.int(groupWindowCurExpire.at(i), expireArg(&w.Cur))
		prevExp := expireArg(&w.Prev)
		a.int(groupWindowPrevTotal.at(i), w.Prev.Total)
		a.int(groupWindowPrevVersion.at(i), w.Prev.Version)
		a.int(groupWindowPrevExpire.at(i), prevExp)
		s.b = appendRow(s.b, w.Prev.Total, w.Prev.Version, prevExp)
		s.cut(a.str(groupWindowPrevRow.at(i)))
	}
	s.done()
	for i := range req.Entries {
		e := &req.Entries[i]
		a.int(groupEntryCost.entryAt(nw, i), e.Cost)
		cr := a.str(groupEntryCountRejected.entryAt(nw, i))
		*cr = "0"
		if e.CountRejected {
			*cr = "1"
		}
		lims := groupEntryWidth.entryAt(nw, i)
		for w := range nw {
			*a.str(lims + w) = "" // no limit in this window
		}
		for _, l := range e.Limits {
			a.int(lims+l.Window, l.Limit)
		}
	}
	return scriptCall{keys: keys, args: a.args}
}

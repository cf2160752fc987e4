package node

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/limiterd/limiterd/ratelimit"
)

// kindField is the request field holding a bucket limit of kind k.
func kindField(k ratelimit.LimitKind) string {
	switch k {
	case ratelimit.TokenLimit:
		return "token"
	case ratelimit.LeakyLimit:
		return "leaky"
	case ratelimit.FixedLimit:
		return "fixed"
	}
	return "kind"
}

// ErrNotLocal is wrapped by the *FieldError of a limit the namespace's
// mode or store cannot serve: a bucket in an estimator namespace, or one
// a store cannot decide (see package sync).
var ErrNotLocal = errors.New("node: the namespace's mode cannot serve this limit")

// checkKinds refuses the first bucket limit of an estimator namespace.
func (ns *Namespace) checkKinds(limits []ratelimit.Limit) error {
	if ns.est != nil {
		return ns.errEstimatorKinds(limits)
	}
	return nil
}

// checkBucketLimit validates limits[i], a bucket limit: its parameters,
// named as limits[i].<kind>.<field>, and that no earlier limit is the same
// bucket.
func checkBucketLimit(limits []ratelimit.Limit, i int) error {
	l := &limits[i]
	field := func(f string) string { return fmt.Sprintf("limits[%d].%s", i, f) }
	switch {
	case l.Kind > ratelimit.FixedLimit:
		return fieldErr(field("kind"), ratelimit.ErrInvalidLimit, "unknown limit kind %d", l.Kind)
	case l.Size != 0:
		return fieldErr(field("window_size"), ratelimit.ErrInvalidLimit, "must be unset in a %s limit", l.Kind)
	case l.Limit != 0:
		return fieldErr(field("limit"), ratelimit.ErrInvalidLimit, "must be unset in a %s limit", l.Kind)
	}
	id, err := bucketIdentity(l)
	if err != nil {
		fe := err.(*ratelimit.FieldError)
		fe.Field = field(kindField(l.Kind) + "." + fe.Field)
		return fe
	}
	if l.Kind == ratelimit.LeakyLimit && (l.WaitTimeout < 0 || l.WaitTimeout > ratelimit.MaxWaitTimeout) {
		return fieldErr(field("leaky.wait_timeout"), ratelimit.ErrInvalidLimit, "must be between 0 and %s, got %s", ratelimit.MaxWaitTimeout, l.WaitTimeout)
	}
	for j := range limits[:i] {
		if limits[j].Kind == l.Kind {
			if prev, _ := bucketIdentity(&limits[j]); prev == id {
				return fieldErr(field(kindField(l.Kind)), ratelimit.ErrInvalidLimit, "is the same %s as limits[%d]", l.Kind, j)
			}
		}
	}
	return nil
}

// bucketIdentity returns the identity of bucket limit l, without its key,
// or its first bad parameter.
func bucketIdentity(l *ratelimit.Limit) (bucketID, error) { return ratelimit.SpecOf(l) }

// bucketStep applies a take of n at t to state s of bucket id (found: s
// is stored; else a new bucket) and returns the answer.
func bucketStep(id *bucketID, s *ratelimit.BucketState, found bool, t, n int64, strict bool) ratelimit.BucketStatus {
	return id.Take(s, found, t, n, strict)
}

// heldBucket is one bucket limit of an Allow while its bucket is locked.
type heldBucket struct {
	i      int // index in the request's limits
	id     bucketID
	strict bool
	wait   time.Duration         // a leaky limit's wait timeout
	e      *bucketEntry          // nil: not held (a read of a new bucket)
	val    ratelimit.BucketState // the state after the take
	st     ratelimit.BucketStatus
}

// lockAll locks the buckets of hs, all of key, and so on one shard: their
// mutexes in the order of their identities, so that two Allows on the
// same buckets never deadlock. With create, missing buckets are created
// in their state at t (within the cap); without, they are left unlocked
// with e nil. unlockAll undoes it.
func (b *bucketTable) lockAll(hs []heldBucket, key string, t int64, create bool) error {
	for i := 1; i < len(hs); i++ { // insertion sort: at most MaxLimits
		for j := i; j > 0 && bucketLess(&hs[j].id, &hs[j-1].id); j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
	kh := b.keyHash(key)
	sh := b.shardOf(kh)
	var hashes [MaxLimits]uint64
	for k := range hs {
		hashes[k] = b.bucketHash(kh, &hs[k].id)
	}
	for {
		sh.mu.RLock()
		missing := false
		for k := range hs {
			hs[k].e = sh.find(hashes[k], &hs[k].id)
			missing = missing || hs[k].e == nil
		}
		sh.mu.RUnlock()
		if !missing || !create {
			gone := false
			for k := range hs {
				if e := hs[k].e; e != nil {
					e.mu.Lock()
					gone = gone || e.gone
				}
			}
			if !gone {
				return nil
			}
			unlockAll(hs) // reclaim removed one meanwhile: look again
			continue
		}
		if !utf8.ValidString(key) {
			return ratelimit.ValidateKey(key)
		}
		for k := range hs {
			if hs[k].e != nil {
				continue
			}
			id := &hs[k].id
			err := b.insert(sh, hashes[k], id, func(s ratelimit.BucketState, found bool) ratelimit.BucketState {
				if !found {
					bucketStep(id, &s, false, t, 0, false)
				}
				return s
			})
			if err != nil {
				return err
			}
		}
		// Lock them all again: a reclaim may have removed a new bucket
		// meanwhile, which is then created again.
	}
}

// unlockAll releases what lockAll locked.
func unlockAll(hs []heldBucket) {
	for k := range hs {
		if e := hs[k].e; e != nil {
			e.mu.Unlock()
		}
	}
}

// bucketLess orders the identities of one key's buckets.
func bucketLess(id, o *bucketID) bool {
	switch {
	case id.Kind != o.Kind:
		return id.Kind < o.Kind
	case id.A != o.A:
		return id.A < o.A
	case id.B != o.B:
		return id.B < o.B
	}
	return id.C < o.C
}

// allowKinds is AllowAt for a request with bucket limits; lims are its
// checked limits, the buckets' with idx -1. It holds the key's window
// entry (when it has window limits) and every bucket's mutex while it
// decides, and admits the cost in every limit or in none. A bucket that
// refuses the cost by itself keeps the state its refusal gives it (a
// token bucket is emptied, as Smyte's is, and STRICT restarts its refill
// clock); a bucket that would admit the cost while another limit refuses
// it is left unchanged and answers as a read. CountRejected counts in the
// windows only. An admitted Allow with no window limit counts in no
// window.
func (ns *Namespace) allowKinds(t time.Time, req *ratelimit.AllowRequest, lims []microLimit, cost int64, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	d, _, err := ns.allowKindsWith(t, req, lims, cost, nil, nil, dst)
	return d, err
}

// allowKindsWith is allowKinds, with two options. With a margin m, it
// counts nothing and reports near when the Allow would be admitted with
// a bucket inside m (bucketsNear). With ex, the buckets' answer comes
// from a store: when the windows admit, ex is called with the buckets
// listed, locked, in a BucketTx, and records the store's answers as
// for ExchangeBuckets' Decide (Before, Verdict, After); then the Allow
// is decided and its buckets take the store's state. It returns ex's
// error.
func (ns *Namespace) allowKindsWith(t time.Time, req *ratelimit.AllowRequest, lims []microLimit, cost int64, m *Margin, ex func(*BucketTx) error, dst []ratelimit.LimitStatus) (ratelimit.Decision, bool, error) {
	if err := ns.checkKinds(req.Limits); err != nil {
		return ratelimit.Decision{Limits: dst}, false, err
	}
	// Most requests hold a few limits: buffers for those are cheaper to
	// clear, on every call, than ones for MaxLimits (as in AllowAt).
	if len(req.Limits) > fewLimits {
		return ns.allowKindsMany(t, req, lims, cost, m, ex, dst)
	}
	var (
		winBuf  [fewLimits]microLimit
		winReq  [fewLimits]ratelimit.Limit
		heldBuf [fewLimits]heldBucket
		winSt   [fewLimits]ratelimit.LimitStatus
	)
	return ns.allowKindsIn(kindsBufs{winBuf[:0], winReq[:0], heldBuf[:0], winSt[:]}, t, req, lims, cost, m, ex, dst)
}

// fewLimits is the size of the limit buffers that AllowAt, CheckAllow
// and allowKindsWith clear on the stack for a common request.
const fewLimits = 4

// allowKindsMany is allowKindsWith for a request of more than fewLimits
// limits, in a function of its own so that its large buffers are cleared
// only when used.
//
//go:noinline
func (ns *Namespace) allowKindsMany(t time.Time, req *ratelimit.AllowRequest, lims []microLimit, cost int64, m *Margin, ex func(*BucketTx) error, dst []ratelimit.LimitStatus) (ratelimit.Decision, bool, error) {
	var (
		winBuf  [MaxLimits]microLimit
		winReq  [MaxLimits]ratelimit.Limit
		heldBuf [MaxLimits]heldBucket
		winSt   [MaxLimits]ratelimit.LimitStatus
	)
	return ns.allowKindsIn(kindsBufs{winBuf[:0], winReq[:0], heldBuf[:0], winSt[:]}, t, req, lims, cost, m, ex, dst)
}

// kindsBufs are allowKindsIn's buffers, with room for every limit of the
// request: its window limits (checked, and as asked), its buckets, and
// the windows' statuses.
type kindsBufs struct {
	wins   []microLimit
	winReq []ratelimit.Limit
	held   []heldBucket
	winSt  []ratelimit.LimitStatus
}

// allowKindsIn is allowKindsWith in the buffers b.
func (ns *Namespace) allowKindsIn(b kindsBufs, t time.Time, req *ratelimit.AllowRequest, lims []microLimit, cost int64, m *Margin, ex func(*BucketTx) error, dst []ratelimit.LimitStatus) (ratelimit.Decision, bool, error) {
	tn := t.UnixNano()
	wins, winReq := b.wins, b.winReq
	for i, l := range lims {
		if l.idx >= 0 {
			winReq = append(winReq, req.Limits[i])
			wins = append(wins, l)
		}
	}
	hs := appendHeld(b.held, req)
	var e *entry
	if len(wins) > 0 {
		var err error
		if e, err = ns.acquireLocked(req.Key); err != nil {
			return ratelimit.Decision{Limits: dst}, false, err
		}
		defer e.mu.Unlock()
	}
	if err := ns.buckets.lockAll(hs, req.Key, tn, cost > 0 || ex != nil); err != nil {
		return ratelimit.Decision{Limits: dst}, false, err
	}
	defer unlockAll(hs)

	// The windows' answer, overruled by the buckets'.
	d := decision{t: tn, cost: cost, allowed: true, never: -1}
	if len(wins) > 0 {
		var cur, prev [MaxLimits]int64
		for i, l := range wins {
			wins[i].ws = ratelimit.WindowStart(tn, time.Duration(l.size))
			c, p := e.slot(l.idx).buckets(wins[i].ws, l.size)
			cur[i], prev[i] = total(c), total(p)
		}
		decide(&d, tn, cost, wins, cur[:len(wins)], prev[:len(wins)], req.CountRejected)
	}
	var tx *BucketTx
	var exErr error
	if ex != nil {
		tx = ns.bucketTx(hs, tn)
		if d.allowed {
			exErr = ex(tx)
		}
		tx.before(hs, tn)
	}
	bucketsOK := stepBuckets(hs, tn, cost)
	if tx != nil && tx.Verdict != NoVerdict {
		bucketsOK = tx.Verdict == StoreAllowed
	}
	if len(wins) > 0 && d.allowed && !bucketsOK {
		d.allowed, d.counted = false, req.CountRejected
		if !d.counted {
			for i := range wins {
				d.cur[i] -= cost
			}
		}
	}
	allowed := d.allowed && bucketsOK
	if m != nil && allowed && bucketsNear(hs, tn, cost, m) {
		return ratelimit.Decision{Limits: dst}, true, nil
	}
	if len(wins) > 0 && d.counted {
		ns.countAll(e, tn, cost)
	}
	if e != nil {
		e.setOver(!allowed)
	}
	commitBuckets(hs, allowed, tn)
	if tx != nil {
		tx.after(hs, tn)
	}
	// The windows' statuses, appended to dst and copied out, to be merged
	// with the buckets' in request order.
	out := d.finish(dst, wins, winReq)
	winSt := b.winSt[:copy(b.winSt, out.Limits[len(dst):])]
	return ns.mergeKinds(out, req, hs, winSt, dst), false, exErr
}

// stepBuckets computes each bucket's answer to cost as if it were alone,
// from its state (a new bucket's when it is not held), and reports whether
// every one admits it.
func stepBuckets(hs []heldBucket, tn, cost int64) bool {
	ok := true
	for k := range hs {
		h := &hs[k]
		h.val = ratelimit.BucketState{}
		if h.e != nil {
			h.val = h.e.val
		}
		h.st = bucketStep(&h.id, &h.val, h.e != nil, tn, cost, h.strict)
		ok = ok && h.st.Allowed
	}
	return ok
}

// commitBuckets stores what stepBuckets computed, the Allow being allowed
// or not as a whole: a bucket that refused keeps the state its refusal
// gives it; one that admitted the cost alone while the Allow is refused
// is left unchanged and answers as a read.
func commitBuckets(hs []heldBucket, allowed bool, tn int64) {
	for k := range hs {
		h := &hs[k]
		switch {
		case allowed || !h.st.Allowed:
			if h.e != nil {
				h.e.val = h.val
				if h.st.Used != 0 {
					h.e.noteConsumed(&h.id, tn)
					h.e.own += h.st.Used
				}
			}
		default:
			h.val = ratelimit.BucketState{}
			if h.e != nil {
				h.val = h.e.val
			}
			h.st = bucketStep(&h.id, &h.val, h.e != nil, tn, 0, false)
		}
	}
}

// mergeKinds completes the decision out of an Allow's windows, whose
// statuses are win, with its buckets hs: the statuses in request order
// appended to dst, the retry after, never and the wait.
func (ns *Namespace) mergeKinds(out ratelimit.Decision, req *ratelimit.AllowRequest, hs []heldBucket, win, dst []ratelimit.LimitStatus) ratelimit.Decision {
	windowsOK := out.Allowed
	var byIndex [MaxLimits]*heldBucket
	for k := range hs {
		byIndex[hs[k].i] = &hs[k]
		out.Allowed = out.Allowed && hs[k].st.Allowed
	}
	wait, waitable := time.Duration(0), windowsOK && !out.Allowed
	for i := range req.Limits {
		h := byIndex[i]
		if h == nil {
			dst = append(dst, win[0])
			win = win[1:]
			continue
		}
		st := h.st
		dst = append(dst, ratelimit.LimitStatus{Kind: req.Limits[i].Kind, Limit: st.Limit, Before: st.Before,
			Rate: st.Limit - st.Remaining, Remaining: st.Remaining, ResetAfter: st.ResetAfter})
		if st.Never && !out.Never {
			out.Never = true
			out.Reason = fmt.Sprintf("cost %g exceeds the %s's capacity %g: it can never be admitted",
				req.Cost, req.Limits[i].Kind, st.Limit)
		}
		if !st.Allowed {
			out.RetryAfter = max(out.RetryAfter, st.RetryAfter)
			if d, ok := st.Wait(h.wait); ok && req.Limits[i].Kind == ratelimit.LeakyLimit {
				wait = max(wait, d)
			} else {
				waitable = false
			}
		}
	}
	out.Limits = dst
	if out.Allowed || out.Never {
		out.RetryAfter = 0
	}
	if waitable && !out.Never {
		out.Wait = wait
	}
	return out
}

package resp

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/limiterd/limiterd/service"
)

// Argument parsing. Numbers are read as Smyte's server reads them: an
// integer argument that is no integer is "value is not an integer or out
// of range", named by its argument.

func intArg(field string, b []byte) (int64, error) {
	if v, ok := parseDigits(b); ok {
		return v, nil // the common case, without strconv's checks
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, invalid(field, "value is not an integer or out of range")
	}
	return v, nil
}

func floatArg(field string, b []byte) (float64, error) {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(v) {
		return 0, invalid(field, "value is not a number")
	}
	return v, nil
}

// durationArg reads a whole number of units (a negative or zero one is
// left to the service to refuse, naming the same field).
func durationArg(field string, b []byte, unit time.Duration) (time.Duration, error) {
	v, err := intArg(field, b)
	if err != nil {
		return 0, err
	}
	return durationOf(field, v, unit)
}

// durationOf is durationArg of the whole number v, already read.
func durationOf(field string, v int64, unit time.Duration) (time.Duration, error) {
	if v > math.MaxInt64/int64(unit) || v < math.MinInt64/int64(unit) {
		return 0, invalid(field, "value is not an integer or out of range")
	}
	return time.Duration(v) * unit, nil
}

// timeArg reads AT: a Unix time in units (seconds for Smyte's RL.REDUCE
// and RL.GET, milliseconds for every other command).
func timeArg(b []byte, unit time.Duration) (time.Time, error) {
	v, err := intArg("at", b)
	if err != nil {
		return time.Time{}, err
	}
	if v < 0 || v > math.MaxInt64/int64(unit) {
		return time.Time{}, invalid("at", "value is not an integer or out of range")
	}
	if v == 0 {
		// 0 is the epoch, not "now" (the zero time.Time).
		return time.Unix(0, 1), nil
	}
	return time.Unix(0, v*int64(unit)), nil
}

// ms is d in whole milliseconds, rounded up so that a client waiting
// that long is not early.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Smyte's token bucket: RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET.

// tokenFields names the arguments as Smyte's README does.
func tokenFields(f string) string {
	return bucketField(f, func(f string) string {
		switch f {
		case "refill_time":
			return "refilltime"
		case "refill_amount":
			return "refill"
		case "cost":
			return "take"
		}
		return commonFields(f)
	})
}

// tokenCmd runs Smyte's RL.[P]REDUCE and RL.[P]GET (named name): unit
// is seconds or milliseconds (refilltime and AT); reduce takes (TAKE,
// default 1), get only reads. The reply is the tokens before the take,
// as Smyte's.
func tokenCmd(name string, unit time.Duration, reduce bool) func(*Server, *call) {
	return func(s *Server, x *call) {
		a := x.args
		max, err := intArg("max", a[2])
		if err != nil {
			writeErr(x.w, err, nil)
			return
		}
		refill, err := intArg("refilltime", a[3])
		if err != nil {
			writeErr(x.w, err, nil)
			return
		}
		amount, take, strict := max, int64(0), false
		if reduce {
			take = 1
		}
		var at []byte
		var ns string
		if len(a) > 4 {
			err = options(a, 4, []string{"REFILL", "TAKE", "AT", "NS"}, []string{"STRICT"}, func(n string, v []byte) (err error) {
				switch n {
				case "STRICT":
					strict = true
				case "REFILL":
					amount, err = intArg("refill", v)
				case "TAKE":
					if !reduce {
						return syntaxErrorf("TAKE is not an option of %s, which takes no tokens", name)
					}
					take, err = intArg("take", v)
				case "AT":
					_, err = intArg("at", v)
					at = v
				case "NS":
					ns = string(v)
				}
				return err
			})
		}
		if err != nil {
			fail(x.w, err, nil)
			return
		}
		// Smyte's own range checks, with its answer.
		for _, c := range [...]struct {
			name string
			bad  bool
		}{{"max", max < 1}, {"refilltime", refill < 1}, {"refill", amount < 1}, {"take", take < 0}} {
			if c.bad {
				writeErr(x.w, invalid(c.name, "value is not an integer or out of range"), nil)
				return
			}
		}
		req := service.AllowRequest{Namespace: ns, Key: string(a[1])}
		if at != nil {
			if req.At, err = timeArg(at, unit); err != nil {
				writeErr(x.w, err, nil)
				return
			}
		}
		d, err := durationOf("refilltime", refill, unit)
		if err != nil {
			writeErr(x.w, err, nil)
			return
		}
		sc := &x.sess.scratch
		sc.cost = float64(take)
		sc.limits[0] = service.Limit{Kind: service.TokenKind, Strict: strict,
			Token: service.TokenBucket{Max: float64(max), RefillTime: d, RefillAmount: float64(amount)}}
		req.Cost, req.Limits = &sc.cost, sc.limits[:1]
		req.Probe = !reduce // RL.GET reads: no decision
		dec, err := s.svc.Allow(x.ctx, req, sc.status[:0])
		if err != nil {
			writeErr(x.w, err, tokenFields)
			return
		}
		x.w.int(int64(dec.Limits[0].Before))
	}
}

// The other kinds, in the same style: required arguments first, then
// options (a keyword and its value, in any order and case). Times are
// Unix milliseconds, durations milliseconds, amounts numbers (fractions
// allowed).

// options reads the options of a[from:]: each name in names (upper case)
// takes a value, each in flags none; set is called for every one met
// (value nil for a flag). An unknown word, a missing value or an option
// given twice is a syntax error saying so.
func options(a [][]byte, from int, names, flags []string, set func(name string, v []byte) error) error {
	var seen uint64 // bit i: names[i], then flags
next:
	for i := from; i < len(a); {
		for j, f := range flags {
			if eqFold(a[i], f) {
				bit := uint64(1) << (len(names) + j)
				if seen&bit != 0 {
					return syntaxErrorf("%s given twice", f)
				}
				seen |= bit
				if err := set(f, nil); err != nil {
					return err
				}
				i++
				continue next
			}
		}
		for j, n := range names {
			if eqFold(a[i], n) {
				bit := uint64(1) << j
				if seen&bit != 0 {
					return syntaxErrorf("%s given twice", n)
				}
				seen |= bit
				if i+1 >= len(a) {
					return syntaxErrorf("%s needs a value", n)
				}
				if err := set(n, a[i+1]); err != nil {
					return err
				}
				i += 2
				continue next
			}
		}
		return syntaxErrorf("unknown option %s", clip(a[i]))
	}
	return nil
}

// fail writes an argument error or a syntax error.
func fail(w *reply, err error, rename func(string) string) {
	if se, ok := err.(syntaxError); ok {
		w.error(se.Error())
		return
	}
	writeErr(w, err, rename)
}

// windowLabel names a window size in replies: whole seconds as "60s",
// else whole milliseconds as "100ms", else Go's form.
func windowLabel(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

// writeRates writes rates as a map of window size to rate.
func writeRates(w *reply, rs []service.Rate) {
	w.mapHeader(len(rs))
	for _, r := range rs {
		w.bulk(windowLabel(r.Size))
		w.double(r.Rate)
	}
}

// windowFields names the sliding-window commands' options.
func windowFields(f string) string {
	switch f {
	case "window_size":
		return "WINDOW"
	case "value":
		return "BY"
	case "cur_diff":
		return "DIFF"
	}
	return commonFields(f)
}

// RL.INCR key [BY value] [WINDOW ms] [AT ms] [NS namespace]
func cmdIncr(s *Server, x *call) {
	req := service.IncrementRequest{Key: string(x.args[1])}
	v := &x.sess.scratch.cost
	err := options(x.args, 2, []string{"BY", "WINDOW", "AT", "NS"}, nil, func(n string, b []byte) (err error) {
		switch n {
		case "BY":
			*v, err = floatArg("BY", b)
			req.Value = v
		case "WINDOW":
			req.WindowSize, err = durationArg("WINDOW", b, time.Millisecond)
		case "AT":
			req.At, err = timeArg(b, time.Millisecond)
		case "NS":
			req.Namespace = string(b)
		}
		return err
	})
	if err != nil {
		fail(x.w, err, nil)
		return
	}
	rs, err := s.svc.Increment(x.ctx, req, x.sess.scratch.rates[:0])
	if err != nil {
		writeErr(x.w, err, windowFields)
		return
	}
	writeRates(x.w, rs)
}

// RL.RATE key [WINDOW ms] [DIFF value] [AT ms] [NS namespace]
func cmdRate(s *Server, x *call) {
	req := service.RateRequest{Key: string(x.args[1])}
	err := options(x.args, 2, []string{"WINDOW", "DIFF", "AT", "NS"}, nil, func(n string, b []byte) (err error) {
		switch n {
		case "WINDOW":
			req.WindowSize, err = durationArg("WINDOW", b, time.Millisecond)
		case "DIFF":
			req.CurDiff, err = floatArg("DIFF", b)
		case "AT":
			req.At, err = timeArg(b, time.Millisecond)
		case "NS":
			req.Namespace = string(b)
		}
		return err
	})
	if err != nil {
		fail(x.w, err, nil)
		return
	}
	rs, err := s.svc.SlidingWindow(x.ctx, req, x.sess.scratch.rates[:0])
	if err != nil {
		writeErr(x.w, err, windowFields)
		return
	}
	writeRates(x.w, rs)
}

// writeDecision writes an Allow's answer as a map: whether it was
// allowed, whether waiting can never help, and the binding limit's state
// (the one with the least remaining): its limit, what remains, and when
// to retry and when it next resets, in milliseconds. A dry run's map has
// two more entries: dry_run (true) and would_allow, what the limits
// decided.
func writeDecision(w *reply, d service.Decision) {
	b := 0
	for i, l := range d.Limits {
		if l.Remaining < d.Limits[b].Remaining {
			b = i
		}
	}
	var st service.LimitStatus
	if len(d.Limits) > 0 {
		st = d.Limits[b]
	}
	if d.DryRun {
		w.mapHeader(8)
	} else {
		w.mapHeader(6)
	}
	w.bulk("allowed")
	w.bool(d.Allowed)
	w.bulk("never")
	w.bool(d.Never)
	w.bulk("limit")
	w.double(st.Limit)
	w.bulk("remaining")
	w.double(st.Remaining)
	w.bulk("retry_after_ms")
	w.int(ms(d.RetryAfter))
	w.bulk("reset_after_ms")
	w.int(ms(st.ResetAfter))
	if d.DryRun {
		w.bulk("dry_run")
		w.bool(true)
		w.bulk("would_allow")
		w.bool(d.WouldAllow)
	}
}

// RL.RESET key [NS namespace] [LEASES] [TOKEN max refill [REFILL amount]]
// [LEAKY size interval] [FIXED limit period] ...: without LEASES and
// buckets, forgets the key's sliding-window counts (answers its rates
// after the reset); else frees its leases and starts each bucket named
// again as new (answers OK). Durations are milliseconds; a bucket
// keyword may repeat, up to the limits of an Allow.
func cmdReset(s *Server, x *call) {
	req, err := resetRequest(x.args, x.sess.scratch.limits[:0])
	if err != nil {
		fail(x.w, err, nil)
		return
	}
	rs, err := s.svc.Reset(x.ctx, req, x.sess.scratch.rates[:0])
	if err != nil {
		writeErr(x.w, err, commonFields)
		return
	}
	if len(req.Buckets) > 0 || req.Leases {
		x.w.simple("OK")
		return
	}
	writeRates(x.w, rs)
}

// resetRequest reads RL.RESET's arguments a, its buckets into limits.
func resetRequest(a [][]byte, limits []service.Limit) (service.ResetRequest, error) {
	req := service.ResetRequest{Key: string(a[1])}
	var ns bool
	for i := 2; i < len(a); {
		switch {
		case eqFold(a[i], "NS"):
			if ns {
				return req, syntaxErrorf("NS given twice")
			}
			if i+1 >= len(a) {
				return req, syntaxErrorf("NS needs a value")
			}
			ns, req.Namespace = true, string(a[i+1])
			i += 2
		case eqFold(a[i], "LEASES"):
			if req.Leases {
				return req, syntaxErrorf("LEASES given twice")
			}
			req.Leases = true
			i++
		case eqFold(a[i], "TOKEN"), eqFold(a[i], "LEAKY"), eqFold(a[i], "FIXED"):
			kw := strings.ToUpper(string(a[i]))
			if i+2 >= len(a) {
				return req, syntaxErrorf("%s needs two values", kw)
			}
			f := func(name string) string {
				return fmt.Sprintf("buckets[%d].%s.%s", len(limits), strings.ToLower(kw), name)
			}
			var lim service.Limit
			var v float64
			var d time.Duration
			var err error
			switch kw {
			case "TOKEN":
				if v, err = floatArg(f("max"), a[i+1]); err == nil {
					d, err = durationArg(f("refill_time"), a[i+2], time.Millisecond)
				}
				lim = service.Limit{Kind: service.TokenKind, Token: service.TokenBucket{Max: v, RefillTime: d}}
			case "LEAKY":
				if v, err = floatArg(f("size"), a[i+1]); err == nil {
					d, err = durationArg(f("interval"), a[i+2], time.Millisecond)
				}
				lim = service.Limit{Kind: service.LeakyKind, Leaky: service.LeakyBucket{Size: v, Interval: d}}
			default:
				if v, err = floatArg(f("limit"), a[i+1]); err == nil {
					d, err = durationArg(f("period"), a[i+2], time.Millisecond)
				}
				lim = service.Limit{Kind: service.FixedKind, Fixed: service.FixedBucket{Limit: v, Period: d}}
			}
			if err != nil {
				return req, err
			}
			i += 3
			if kw == "TOKEN" && i < len(a) && eqFold(a[i], "REFILL") {
				if i+1 >= len(a) {
					return req, syntaxErrorf("REFILL needs a value")
				}
				if lim.Token.RefillAmount, err = floatArg(f("refill_amount"), a[i+1]); err != nil {
					return req, err
				}
				i += 2
			}
			limits = append(limits, lim)
		default:
			return req, syntaxErrorf("unknown option %s", clip(a[i]))
		}
	}
	req.Buckets = limits
	return req, nil
}

// RL.POLICY key policy [COST n] [PENALTY] [AT ms] [NS namespace]
func cmdPolicy(s *Server, x *call) {
	req := service.AllowRequest{Key: string(x.args[1]), Policy: string(x.args[2])}
	if err := allowOptions(x, 3, "COST", &req, nil); err != nil {
		fail(x.w, err, nil)
		return
	}
	d, err := s.svc.Allow(x.ctx, req, x.sess.scratch.status[:0])
	if err != nil {
		writeErr(x.w, err, commonFields)
		return
	}
	writeDecision(x.w, d)
}

// allowOptions reads the options every Allow command shares into req
// (COST or TAKE named cost, PENALTY, AT, NS) and the extra ones into
// extra.
func allowOptions(x *call, from int, cost string, req *service.AllowRequest, extra func(string, []byte) error) error {
	names := []string{cost, "AT", "NS"}
	if extra != nil {
		names = append(names, "WAIT")
	}
	c := &x.sess.scratch.cost
	return options(x.args, from, names, []string{"PENALTY"}, func(n string, b []byte) (err error) {
		switch n {
		case cost:
			*c, err = floatArg(cost, b)
			req.Cost = c
		case "PENALTY":
			req.CountRejected = true
		case "AT":
			req.At, err = timeArg(b, time.Millisecond)
		case "NS":
			req.Namespace = string(b)
		default:
			err = extra(n, b)
		}
		return err
	})
}

// RL.ALLOW key window limit [window limit ...] [COST n] [PENALTY] [AT ms] [NS namespace]
func cmdAllow(s *Server, x *call) {
	a := x.args
	lims := &x.sess.scratch.limits
	n, i := 0, 2
	for ; i+1 < len(a); i += 2 {
		w, err := strconv.ParseInt(string(a[i]), 10, 64)
		if err != nil {
			break // the options begin
		}
		if n == len(lims) {
			writeErr(x.w, invalid("limits", "at most "+itoa(service.MaxLimits)+" window limit pairs"), nil)
			return
		}
		if w > math.MaxInt64/int64(time.Millisecond) || w < 0 {
			writeErr(x.w, invalid(pairField(n, "window_size"), "value is not an integer or out of range"), nil)
			return
		}
		l, err := floatArg(pairField(n, "limit"), a[i+1])
		if err != nil {
			writeErr(x.w, err, nil)
			return
		}
		lims[n] = service.Limit{Size: time.Duration(w) * time.Millisecond, Limit: l}
		n++
	}
	if n == 0 {
		x.w.error("ERR syntax error: RL.ALLOW key window limit [window limit ...] [COST n] [PENALTY] [AT ms] [NS namespace]")
		return
	}
	if i == len(a)-1 {
		if _, err := strconv.ParseInt(string(a[i]), 10, 64); err == nil {
			x.w.error("ERR syntax error: window " + clip(a[i]) + " has no limit")
			return
		}
	}
	req := service.AllowRequest{Key: string(a[1]), Limits: lims[:n]}
	if err := allowOptions(x, i, "COST", &req, nil); err != nil {
		fail(x.w, err, nil)
		return
	}
	d, err := s.svc.Allow(x.ctx, req, x.sess.scratch.status[:0])
	if err != nil {
		writeErr(x.w, err, commonFields)
		return
	}
	writeDecision(x.w, d)
}

// pairField names RL.ALLOW's i-th window limit pair's field as the
// service does.
func pairField(i int, f string) string { return "limits[" + itoa(int64(i)) + "]." + f }

// leakyFields names RL.LEAKY's arguments.
func leakyFields(f string) string {
	return bucketField(f, func(f string) string {
		switch f {
		case "wait_timeout":
			return "WAIT"
		case "cost":
			return "TAKE"
		}
		return commonFields(f)
	})
}

// RL.LEAKY key size interval [TAKE n] [WAIT ms] [AT ms] [NS namespace]
func cmdLeaky(s *Server, x *call) {
	cmdBucket(s, x, "size", "interval", leakyFields, func(size float64, interval time.Duration) service.Limit {
		return service.Limit{Kind: service.LeakyKind, Leaky: service.LeakyBucket{Size: size, Interval: interval}}
	}, func(lim *service.Limit) func(string, []byte) error {
		return func(_ string, b []byte) (err error) {
			lim.WaitTimeout, err = durationArg("WAIT", b, time.Millisecond)
			return err
		}
	})
}

// cmdBucket serves a bucket command of one Limit, whose arguments are
// the key, an amount and a duration in milliseconds (named amount and
// dur), then the Allow options (TAKE for the cost) and, when wait is
// set, WAIT; fields names the service's fields in its errors.
func cmdBucket(s *Server, x *call, amount, dur string, fields func(string) string,
	limit func(float64, time.Duration) service.Limit, wait func(*service.Limit) func(string, []byte) error) {
	a := x.args
	v, err := floatArg(amount, a[2])
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	d, err := durationArg(dur, a[3], time.Millisecond)
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	lim := x.sess.scratch.limits[:1]
	lim[0] = limit(v, d)
	req := service.AllowRequest{Key: string(a[1]), Limits: lim}
	var extra func(string, []byte) error
	if wait != nil {
		extra = wait(&lim[0])
	}
	if err := allowOptions(x, 4, "TAKE", &req, extra); err != nil {
		fail(x.w, err, nil)
		return
	}
	dec, err := s.svc.Allow(x.ctx, req, x.sess.scratch.status[:0])
	if err != nil {
		writeErr(x.w, err, fields)
		return
	}
	writeDecision(x.w, dec)
}

// fixedFields names RL.FIXED's arguments.
func fixedFields(f string) string {
	return bucketField(f, func(f string) string {
		if f == "cost" {
			return "TAKE"
		}
		return commonFields(f)
	})
}

// RL.FIXED key limit period [TAKE n] [AT ms] [NS namespace]
func cmdFixed(s *Server, x *call) {
	cmdBucket(s, x, "limit", "period", fixedFields, func(limit float64, period time.Duration) service.Limit {
		return service.Limit{Kind: service.FixedKind, Fixed: service.FixedBucket{Limit: limit, Period: period}}
	}, nil)
}

// Concurrency leases.

// RL.ACQUIRE key limit ttl [NS namespace]
func cmdAcquire(s *Server, x *call) {
	a := x.args
	limit, err := intArg("limit", a[2])
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	ttl, err := durationArg("ttl", a[3], time.Millisecond)
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	req := service.AcquireRequest{Key: string(a[1]), Limit: limit, TTL: ttl}
	err = options(a, 4, []string{"NS"}, nil, func(_ string, b []byte) error {
		req.Namespace = string(b)
		return nil
	})
	if err != nil {
		fail(x.w, err, nil)
		return
	}
	g, err := s.svc.Acquire(x.ctx, req)
	if err != nil {
		writeErr(x.w, err, commonFields)
		return
	}
	w := x.w
	w.mapHeader(5)
	w.bulk("acquired")
	w.bool(g.OK)
	w.bulk("lease")
	if g.OK {
		w.bulk(g.Lease)
	} else {
		w.null()
	}
	w.bulk("expires_at_ms")
	if g.OK {
		w.int(g.ExpiresAt.UnixMilli())
	} else {
		w.int(0)
	}
	w.bulk("held")
	w.int(g.Held)
	w.bulk("retry_after_ms")
	w.int(ms(g.RetryAfter))
}

// RL.RELEASE lease
func cmdRelease(s *Server, x *call) {
	r, err := s.svc.Release(x.ctx, string(x.args[1]))
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	w := x.w
	w.mapHeader(2)
	w.bulk("released")
	w.bool(r.OK)
	w.bulk("pending")
	w.bool(r.Pending)
}

// RL.RENEW lease ttl
func cmdRenew(s *Server, x *call) {
	ttl, err := durationArg("ttl", x.args[2], time.Millisecond)
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	r, err := s.svc.Renew(x.ctx, string(x.args[1]), ttl)
	if err != nil {
		writeErr(x.w, err, nil)
		return
	}
	w := x.w
	w.mapHeader(2)
	w.bulk("renewed")
	w.bool(r.OK)
	w.bulk("expires_at_ms")
	if r.OK {
		w.int(r.ExpiresAt.UnixMilli())
	} else {
		w.int(0)
	}
}

package strategytest

import (
	"fmt"
	"maps"
	"slices"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// The lease kind: batches of one to four ops on two keys and six ids, at
// a clock that moves forward and onto the expiries the reference holds (a
// lease renewed, released or counted the ns before, at or after its
// expiry). It never moves back: a store may go on counting, for a caller
// whose clock is behind, a lease an earlier call dropped (PostgreSQL
// skips such rows rather than deleting them), where ApplyLease has
// forgotten it; LeaseStore expects the callers' clocks to agree. Every reply is compared with clustersync.ApplyLease run
// on sets kept here; a count of each key reads the state back.

var leaseKeys = [...]string{"l", "l|:é\x00 x"}

const leaseIDs = 6

// Lease op codes.
const (
	lTick   = iota // time step
	lBatch         // n, then n ops (kind, key, id, limit, expiry)
	lExpiry        // to an expiry the reference holds, ±1 ns
	lRetry         // the last batch again
	lOps
)

type leaseFuzz struct {
	*fuzzer
	ls   clustersync.LeaseStore
	ref  leaseRef
	now  int64
	last []clustersync.LeaseOp
}

func fuzzLeases(s clustersync.Store) func(*fuzzer) func() bool {
	return func(f *fuzzer) func() bool {
		ls, ok := s.(clustersync.LeaseStore)
		if !ok {
			return nil
		}
		x := &leaseFuzz{fuzzer: f, ls: ls, ref: leaseRef{}}
		x.now = f.base + f.src.in(0, int64(time.Minute))
		return x.step
	}
}

func (x *leaseFuzz) step() bool {
	switch x.src.pick(lOps) {
	case lTick:
		x.now += x.src.in(0, int64(2*time.Second))
		x.log("tick to %d", x.now-x.base)
	case lBatch:
		ops := make([]clustersync.LeaseOp, 1+x.src.pick(4))
		for i := range ops {
			ops[i] = x.op()
		}
		x.send(ops)
	case lExpiry:
		// The expiries the reference holds, in a fixed order.
		var ts []int64
		for _, k := range leaseKeys {
			if s := x.ref[[2]string{x.ns, k}]; s != nil {
				ts = slices.AppendSeq(ts, maps.Values(s.Live))
				ts = slices.AppendSeq(ts, maps.Values(s.Released))
			}
		}
		if len(ts) > 0 {
			slices.Sort(ts)
			x.now = max(x.now, ts[x.src.pick(len(ts))]+x.src.in(-1, 1))
			x.log("to an expiry: %d", x.now-x.base)
		}
	case lRetry:
		if x.last != nil {
			x.send(x.last)
		}
	}
	return !x.t.Failed()
}

// op reads one op: kind, key, id, limit (0 to 4) and an expiry from a
// second before now to five seconds after, often now itself.
func (x *leaseFuzz) op() clustersync.LeaseOp {
	op := clustersync.LeaseOp{
		Kind:      clustersync.LeaseAcquire + clustersync.LeaseOpKind(x.src.pick(5)),
		Namespace: x.ns,
		Key:       leaseKeys[x.src.pick(len(leaseKeys))],
		ID:        fmt.Sprintf("id%d", x.src.pick(leaseIDs)),
		Limit:     int64(x.src.pick(5)),
	}
	switch x.src.pick(4) {
	case 0:
		op.Expiry = x.now + x.src.in(-1, 1)
	case 1:
		op.Expiry = x.now - x.src.in(0, int64(time.Second))
	default:
		op.Expiry = x.now + x.src.in(0, int64(5*time.Second))
	}
	if op.Kind == clustersync.LeaseCount {
		// A count naming the last id is a clear: inputs of before the
		// clear keep their meaning but for those.
		if op.ID == fmt.Sprintf("id%d", leaseIDs-1) {
			op.Kind = clustersync.LeaseClear
		}
		op.ID = ""
	}
	return op
}

// send sends ops at now to both, then counts each key on both.
func (x *leaseFuzz) send(ops []clustersync.LeaseOp) {
	x.last = ops
	for _, k := range leaseKeys {
		ops = append(ops, clustersync.LeaseOp{Kind: clustersync.LeaseCount, Namespace: x.ns, Key: k})
	}
	var desc string
	for _, op := range ops {
		desc += "[" + showOp(op, x.now) + "]"
	}
	x.log("leases at %d: %s", x.now-x.base, desc)
	got := make([]clustersync.LeaseReply, len(ops))
	for i := range got {
		got[i] = clustersync.LeaseReply{OK: true, Held: unset, Next: unset}
	}
	x.must("Leases", x.ls.Leases(x.ctx, x.now, ops, got))
	want := x.ref.apply(x.now, ops)
	for i := range ops {
		if got[i] != want[i] {
			x.fail("Leases at %d, op %d of %d (%s):\n got %+v\nwant %+v", x.now-x.base, i, len(ops), showOp(ops[i], x.now), got[i], want[i])
		}
	}
}

// leaseSeeds: a lease acquired, renewed at its expiry's ns and released
// just after, by the ops' bytes; then the generator.
func leaseSeeds() [][]byte {
	var e encoder
	e.in(0, 0) // first time
	op := func(kind clustersync.LeaseOpKind, expiryCase int, d int64) {
		e.u8(int(kind - clustersync.LeaseAcquire))
		e.u8(0) // key
		e.u8(0) // id0
		e.u8(1) // limit 1
		e.u8(expiryCase)
		e.in(d, map[int]int64{0: -1, 1: 0, 2: 0}[expiryCase])
	}
	e.u8(lBatch)
	e.u8(1) // two ops
	op(clustersync.LeaseAcquire, 2, int64(time.Second))
	op(clustersync.LeaseAcquire, 2, int64(time.Second)) // a replay
	e.u8(lExpiry)
	e.u8(0)
	e.in(0, -1) // at its expiry
	e.u8(lBatch)
	e.u8(0)
	op(clustersync.LeaseRenew, 2, int64(time.Second))
	e.u8(lExpiry)
	e.u8(0)
	e.in(1, -1) // just after
	e.u8(lBatch)
	e.u8(0)
	op(clustersync.LeaseRelease, 2, int64(time.Second))
	return [][]byte{e}
}

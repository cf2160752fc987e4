package harness

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// Load sends Increments of one namespace round-robin over nodes and keys,
// all at one timestamp, recording when each node acknowledged a hit and
// which calls failed: the driver of the failure and compose tests, which
// compare what was acknowledged with what the store holds.
type Load struct {
	Namespace string
	Keys      []string
	At        time.Time
	// firstNode numbers the nodes in Failures: node i is
	// "node-<firstNode+i>".
	firstNode int

	mu      sync.Mutex
	perKey  []int64       // acknowledged hits per key
	acks    [][]time.Time // per node: when each acknowledgement arrived, ascending
	failed  []failedCall
	slowest time.Duration // slowest acknowledged call
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type failedCall struct {
	node  int
	start time.Time
	err   error
}

// StartLoad starts workers sending l's calls to nodes until End; nodes
// are named from firstNode in Failures.
func StartLoad(nodes []limiterv1.RateLimiterClient, firstNode int, namespace string, keys []string, at time.Time, workers int) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{Namespace: namespace, Keys: keys, At: at, firstNode: firstNode,
		perKey: make([]int64, len(keys)), acks: make([][]time.Time, len(nodes)), stop: cancel}
	var seq atomic.Int64
	for range workers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				i := seq.Add(1)
				k := int(i) % len(keys)
				ni := int(i/int64(len(keys))) % len(nodes)
				start := time.Now()
				cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := nodes[ni].Increment(cctx, &limiterv1.IncrementRequest{
					Namespace: namespace, Key: keys[k], At: timestamppb.New(at)})
				ccancel()
				l.mu.Lock()
				end := time.Now() // under the lock: acks stay in order
				if err != nil {
					l.failed = append(l.failed, failedCall{ni, start, err})
				} else {
					l.perKey[k]++
					l.acks[ni] = append(l.acks[ni], end)
					l.slowest = max(l.slowest, end.Sub(start))
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // a stopped node refuses at once
				}
			}
		})
	}
	return l
}

// End stops the load and waits for every call to return; it may be
// called again.
func (l *Load) End() {
	l.stop()
	l.wg.Wait()
}

// Total returns the acknowledged hits.
func (l *Load) Total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, c := range l.perKey {
		n += c
	}
	return n
}

// Counts returns the acknowledged hits per key, in Keys' order.
func (l *Load) Counts() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.perKey)
}

// AcksBetween counts node's acknowledgements in [from, to).
func (l *Load) AcksBetween(node int, from, to time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.acks[node]
	lo := sort.Search(len(a), func(j int) bool { return !a[j].Before(from) })
	hi := sort.Search(len(a), func(j int) bool { return !a[j].Before(to) })
	return int64(hi - lo)
}

// AcksSince counts node's acknowledgements at or after t.
func (l *Load) AcksSince(node int, t time.Time) int64 {
	return l.AcksBetween(node, t, time.Unix(1<<40, 0))
}

// FailedBefore counts the failed calls to node that started before t:
// calls whose outcome is unknown when the node died during them.
func (l *Load) FailedBefore(node int, t time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, f := range l.failed {
		if f.node == node && f.start.Before(t) {
			n++
		}
	}
	return n
}

// FailedCount counts the failed calls to nodes other than skip (-1: all).
func (l *Load) FailedCount(skip int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.failed {
		if f.node != skip {
			n++
		}
	}
	return n
}

// Slowest returns the slowest acknowledged call's duration.
func (l *Load) Slowest() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slowest
}

// Failures summarises the failed calls by node and status code, "none"
// without any.
func (l *Load) Failures() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[string]int{}
	for _, f := range l.failed {
		by[fmt.Sprintf("node-%d %s", l.firstNode+f.node, status.Code(f.err))]++
	}
	if len(by) == 0 {
		return "none"
	}
	s := make([]string, 0, len(by))
	for k, v := range by {
		s = append(s, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

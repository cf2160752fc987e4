package campaign

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Outcome is what a client knows of a call.
type Outcome string

const (
	// OK: the call was answered.
	OK Outcome = "ok"
	// Failed: the call was refused and changed nothing (an error the
	// service returns before counting: a store unavailable for a lease, an
	// invalid argument).
	Failed Outcome = "failed"
	// Unknown: a time-out or a cut connection; the call may have been
	// applied, and is judged as possibly applied.
	Unknown Outcome = "unknown"
)

// Op kinds.
const (
	OpAllow     = "allow"     // a sliding-window Allow
	OpIncrement = "increment" // an Increment
	OpToken     = "token"     // an Allow of a token bucket
	OpLeaky     = "leaky"     // an Allow of a leaky bucket
	OpFixed     = "fixed"     // an Allow of a fixed bucket
	OpAcquire   = "acquire"
	OpRenew     = "renew"
	OpRelease   = "release"
)

// Op is one call of the load with its outcome. Times are offsets from
// the run's start, read on the client.
type Op struct {
	Kind      string
	Namespace string
	Key       string
	Node      int
	Start     time.Duration
	End       time.Duration
	Outcome   Outcome
	Err       string `json:",omitempty"`
	// Allowed: the Allow admitted (or the lease was acquired, renewed,
	// released).
	Allowed bool `json:",omitempty"`
	// Rate is an Increment's answer.
	Rate float64 `json:",omitempty"`
	// Lease is the lease acquired, renewed or released.
	Lease string `json:",omitempty"`
	// TTL is an Acquire's or Renew's.
	TTL time.Duration `json:",omitempty"`
}

// Applied is a fault as the nemesis applied it: Kind and Node of the
// schedule's fault, with the offsets at which it began and ended.
type Applied struct {
	Fault Fault
	Began time.Duration
	Ended time.Duration
	// LastSync is, for a node killed or stopped, each namespace's last
	// fully successful sync before it, as the node reported it.
	LastSync map[string]time.Duration `json:",omitempty"`
}

// History records every call of a run, and the faults as applied.
type History struct {
	mu     sync.Mutex
	start  time.Time
	Ops    []Op
	Faults []Applied
	// Tick is the longest sync tick the nodes measured.
	Tick time.Duration
}

// NewHistory starts recording at start.
func NewHistory(start time.Time) *History { return &History{start: start} }

// Since is t as an offset from the run's start.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.start) }

// Add records op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.Ops = append(h.Ops, op)
	h.mu.Unlock()
}

// AddFault records a fault applied.
func (h *History) AddFault(a Applied) {
	h.mu.Lock()
	h.Faults = append(h.Faults, a)
	h.mu.Unlock()
}

// Write writes the history as JSON lines: the schedule, then each fault
// applied, then each call.
func (h *History) Write(path string, s Schedule) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.Encode(map[string]any{"schedule": s, "longest_tick": h.Tick})
	for _, a := range h.Faults {
		enc.Encode(map[string]any{"fault": a})
	}
	for _, op := range h.Ops {
		enc.Encode(op)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

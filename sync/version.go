package sync

import (
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"
)

// NewIncarnation returns a name for this process's life: the configured
// node name plus a random id drawn now, so a restarted node never writes
// over what its previous life stored.
func NewIncarnation(nodeName string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return nodeName + "/" + hex.EncodeToString(b[:])
}

// Versions issues row versions for one incarnation: max(now in µs, last+1),
// so they only grow even if the clock steps back. Safe for concurrent use.
type Versions struct {
	last atomic.Int64
	now  func() time.Time
}

// NewVersions returns a version source reading now.
func NewVersions(now func() time.Time) *Versions {
	return &Versions{now: now}
}

// Next returns a version greater than every one returned before.
func (v *Versions) Next() int64 {
	n := v.now().UnixMicro()
	for {
		last := v.last.Load()
		next := max(n, last+1)
		if v.last.CompareAndSwap(last, next) {
			return next
		}
	}
}

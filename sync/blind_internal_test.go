package sync

import (
	"testing"
	"time"
)

// TestBlindCoversALateTick: the others' hits stay unseen for two periods
// and a tick, or, when the last successful tick started longer ago (one
// running long, or failing), for that time and a period more.
func TestBlindCoversALateTick(t *testing.T) {
	s := &periodic{shared: shared{&Syncer{period: 100 * time.Millisecond}}}
	s.s.lastTick.Store(int64(10 * time.Millisecond))
	if got, want := s.blind(), 210*time.Millisecond; got != want {
		t.Fatalf("blind before any tick: %s, want %s", got, want)
	}
	s.s.fetchedAt.Store(time.Now().UnixNano())
	if got := s.blind(); got != 210*time.Millisecond {
		t.Fatalf("blind just after a tick: %s, want 210ms", got)
	}
	s.s.fetchedAt.Store(time.Now().Add(-3 * time.Second).UnixNano())
	if got := s.blind(); got < 3110*time.Millisecond || got > 4*time.Second {
		t.Fatalf("blind 3 s after the last successful tick began: %s, want about 3.11 s", got)
	}
}

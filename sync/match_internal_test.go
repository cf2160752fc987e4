package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestMatchPending checks that dirty windows find their interest window
// both when the two walks agree (the merge) and when a concurrent change
// reordered them or left a dirty window out of the interest set (the map).
func TestMatchPending(t *testing.T) {
	w := func(key string, start int64) node.Window {
		return node.Window{Key: key, Size: time.Second, Start: start}
	}
	p := func(key string, start int64) node.Pending {
		return node.Pending{Key: key, Size: time.Second, Start: start}
	}
	windows := []node.Window{w("a", 2), w("a", 1), w("b", 2), w("b", 1), w("c", 2), w("c", 1)}
	for _, c := range []struct {
		name    string
		pending []node.Pending
		want    []int
	}{
		{"in step", []node.Pending{p("a", 1), p("b", 2), p("b", 1), p("c", 2)}, []int{1, 2, 3, 4}},
		{"reordered", []node.Pending{p("c", 2), p("a", 2), p("b", 1)}, []int{4, 0, 3}},
		{"not of interest", []node.Pending{p("a", 2), p("x", 2), p("c", 1)}, []int{0, -1, 5}},
		{"none", nil, []int{}},
	} {
		s := &Syncer{tick: node.Tick{Read: windows, Push: c.pending}}
		ticker{s}.matchPending()
		if !slices.Equal(s.match, c.want) {
			t.Errorf("%s: match = %v, want %v", c.name, s.match, c.want)
		}
	}
}

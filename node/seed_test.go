package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func TestSeedWorkedExample(t *testing.T) {
	ns, err := node.NewNamespace(node.Config{Name: "default", WindowSizes: []time.Duration{time.Minute}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1_700_000_040, 0) // a minute boundary
	if _, err := ns.IncrementAt(base.Add(10*time.Second), "k", time.Minute, 40, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.IncrementAt(base.Add(70*time.Second), "k", time.Minute, 10, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ns.RateAt(base.Add(90*time.Second), "k", time.Minute, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rate != 30 {
		t.Fatalf("rate = %+v, want 30", got)
	}
}

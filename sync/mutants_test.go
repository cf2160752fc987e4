package sync_test

import (
	"testing"

	"github.com/limiterd/limiterd/internal/mutant"
)

// TestTestsCatchMutants: each mutant, a bug planted in one file, fails the
// test named next to it (see package mutant).
func TestTestsCatchMutants(t *testing.T) {
	mutant.Run(t, []mutant.Mutant{
		{
			Name: "a bucket reset is not sent to the store as one",
			File: "bucketsync.go",
			Old:  "calls[i].Reset = reset",
			New:  "calls[i].Reset = false",
			Test: "TestResetBucketsAt",
		},
		{
			Name: "a store's bucket reset keeps the caught-up state",
			File: "bucket.go",
			Old:  "r.State = c.Bucket.Init(at)",
			New:  "_ = c.Bucket.Init(at)",
			Test: "TestResetBucketsAt",
		},
		{
			Name: "a lease clear frees nothing in the store",
			File: "lease.go",
			Old:  "delete(s.Live, id)\n\t\t\tif until := max(op.Expiry, t, s.Released[id]); until > now {",
			New:  "if until := max(op.Expiry, t, s.Released[id]); until > now {",
			Test: "TestClearLeasesAt",
		},
		{
			Name: "a reset's rows cancel the others' sum but not the node's own totals",
			File: "reset.go",
			Old:  "if total := -others[i] - w.Own; total != 0 {",
			New:  "if total := -others[i]; total != 0 {",
			Test: "TestResetAt",
		},
		{
			Name: "a failed change read drops its new keys",
			File: "changetick.go",
			Old: `		if !errors.Is(err, ErrChangesLost) {
			c.requeue(c.keys)
			return err
		}`,
			New: `		if !errors.Is(err, ErrChangesLost) {
			return err
		}`,
			Test: "TestChangesFailedReadRetriesNewKey",
		},
		{
			Name: "a failed read of new keys' windows drops the keys",
			File: "changetick.go",
			Old: `	if err != nil {
		c.requeue(c.keys)
	}
	return err
}`,
			New: `	return err
}`,
			Test: "TestChangesFailedFetchRetriesNewKey",
		},
		{
			Name: "a failed read of the interest set drops the new keys",
			File: "changetick.go",
			Old: `	s.ns.ApplyTick(&s.tick)
	if err != nil {
		c.requeue(c.keys)
		return err
	}
	c.cursor = start`,
			New: `	s.ns.ApplyTick(&s.tick)
	if err != nil {
		return err
	}
	c.cursor = start`,
			Test:   "TestChangesFailedFullReadRetriesNewKey",
			Caught: "a's hits read",
		},
		{
			Name: "a bucket call of the recorded version taken as late",
			File: "bucket.go",
			Old:  "c.Life == rec.Life && c.Version < rec.Version:",
			New:  "c.Life == rec.Life && c.Version <= rec.Version:",
			Test: "TestApplyBucketsReplayAndLate",
		},
		{
			Name: "a group decision counts the others' current totals twice",
			File: "groupallow.go",
			Old:  "admits(w, req.At, w.Cur.Total+counted, others[l.Window], e.Cost, l.Limit)",
			New:  "admits(w, req.At, w.Cur.Total+counted+others[l.Window][0], others[l.Window], e.Cost, l.Limit)",
			Test: "TestDecideGroup",
		},
		{
			Name: "a group's written totals hold the others'",
			File: "groupallow.go",
			Old:  "cur[w] = req.Windows[w].Cur.Total + counted",
			New:  "cur[w] = req.Windows[w].Cur.Total + counted + others[w][0]",
			Test: "TestDecideGroup",
		},
		{
			Name: "a change read that fails on a page drops the pages before it",
			File: "changetick.go",
			Old:  "	if errors.Is(rerr, ErrChangesLost) {",
			New:  "	if rerr != nil {",
			Test: "TestChangesFailedPageKeepsProgress",
		},
	})
}

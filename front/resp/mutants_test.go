package resp

import (
	"testing"

	"github.com/limiterd/limiterd/internal/mutant"
)

// TestTestsCatchMutants: each mutant, a bug planted in one file, fails the
// test named next to it (see package mutant).
func TestTestsCatchMutants(t *testing.T) {
	mutant.Run(t, []mutant.Mutant{
		{
			Name: "the binding limit the last of a tie",
			File: "limits.go",
			Old:  "if l.Remaining < d.Limits[b].Remaining {",
			New:  "if l.Remaining <= d.Limits[b].Remaining {",
			Test: "TestWriteDecisionBindingLimit",
		},
		{
			Name: "the binding limit the one with the most remaining",
			File: "limits.go",
			Old:  "if l.Remaining < d.Limits[b].Remaining {",
			New:  "if l.Remaining > d.Limits[b].Remaining {",
			Test: "TestWriteDecisionBindingLimit",
		},
		{
			Name: "no deadline to authenticate",
			File: "server.go",
			Old:  "fc.authBy = time.Now().Add(cfg.AuthTimeout)",
			New:  "fc.authBy = time.Time{}",
			Test: "TestAuthDeadline",
		},
		{
			Name: "an authenticated connection still held to the deadline",
			File: "server.go",
			Old:  "c.fc.authed.Store(true)",
			New:  "_ = c.fc",
			Test: "TestAuthDeadline",
		},
	})
}

package service_test

import (
	"testing"

	"github.com/limiterd/limiterd/internal/mutant"
)

// TestTestsCatchMutants: each mutant, a bug planted in one file, fails the
// test named next to it (see package mutant).
func TestTestsCatchMutants(t *testing.T) {
	mutant.Run(t, []mutant.Mutant{
		{
			Name: "a reset of leases alone resets the windows instead",
			File: "reset.go",
			Old:  "windows := len(req.Buckets) == 0 && !req.Leases",
			New:  "windows := len(req.Buckets) == 0",
			Test: "TestResetBucketsAndLeasesLocal",
		},
		{
			Name: "a call's namespace resolved before it is authorized",
			File: "service.go",
			Old: `	if err := s.authorize(ctx, namespace, op); err != nil {
		return route{}, t, err
	}
	r, err := s.resolve(namespace, last)
	if err != nil {
		return r, t, err
	}
`,
			New: `	r, err := s.resolve(namespace, last)
	if err != nil {
		return r, t, err
	}
	if err := s.authorize(ctx, namespace, op); err != nil {
		r.exit()
		return route{}, t, err
	}
`,
			Test: "TestAuthorizationBeforeNamespace",
		},
		{
			Name: "an Acquire's namespace resolved before it is authorized",
			File: "lease.go",
			Old: `	if err := s.authorize(ctx, req.Namespace, auth.Write); err != nil {
		return Acquired{}, err
	}
	r, err := s.resolve(req.Namespace, last)
	if err != nil {
		return Acquired{}, err
	}
`,
			New: `	r, err := s.resolve(req.Namespace, last)
	if err != nil {
		return Acquired{}, err
	}
	if err := s.authorize(ctx, req.Namespace, auth.Write); err != nil {
		r.exit()
		return Acquired{}, err
	}
`,
			Test: "TestAuthorizationBeforeNamespace",
		},
		{
			Name: "a lease's namespace resolved before it is authorized",
			File: "lease.go",
			Old: `	if err := s.authorize(ctx, id.Namespace, auth.Write); err != nil {
		return route{}, id, err
	}
	r, err := s.resolve(id.Namespace, last)
	return r, id, err
`,
			New: `	r, err := s.resolve(id.Namespace, last)
	if err != nil {
		return r, id, err
	}
	if err := s.authorize(ctx, id.Namespace, auth.Write); err != nil {
		r.exit()
		return route{}, id, err
	}
	return r, id, err
`,
			Test: "TestAuthorizationBeforeNamespace",
		},
		{
			Name: "a namespace's shadow mode ignored",
			File: "service.go",
			Old:  "shadow = shadow || r.shadow",
			New:  "shadow = shadow || false",
			Test: "TestDryRun",
		},
		{
			Name: "a dry run reported to the observer as a decision like any other",
			File: "service.go",
			Old:  "Cost: ar.Cost, DryRun: shadow})",
			New:  "Cost: ar.Cost})",
			Test: "TestDryRun",
		},
		{
			Name: "a reset needs only the write grant",
			File: "reset.go",
			Old:  "auth.Admin, nil",
			New:  "auth.Write, nil",
			Test: "TestResetNeedsAdmin",
		},
		{
			Name: "a call's time may be further ahead of the clock",
			File: "kind.go",
			Old:  "const MaxFuture = time.Second",
			New:  "const MaxFuture = 2 * time.Second",
			Test: "TestFirstErrorSameInEveryMode",
		},
	})
}

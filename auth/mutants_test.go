package auth_test

import (
	"testing"

	"github.com/limiterd/limiterd/internal/mutant"
)

// TestTestsCatchMutants: each mutant, a bug planted in one file, fails the
// test named next to it (see package mutant).
func TestTestsCatchMutants(t *testing.T) {
	mutant.Run(t, []mutant.Mutant{
		{
			Name: "a grant matches the namespaces it is a prefix of",
			File: "auth.go",
			Old:  "	return p.all || p.namespaces[namespace]\n",
			New: `	for g := range p.namespaces {
		if strings.HasPrefix(namespace, g) {
			return true
		}
	}
	return p.all
`,
			Test: "TestNamespaceGrantIsExact",
		},
		{
			Name: "a grant matches its prefixes",
			File: "auth.go",
			Old:  "	return p.all || p.namespaces[namespace]\n",
			New: `	for g := range p.namespaces {
		if strings.HasPrefix(g, namespace) {
			return true
		}
	}
	return p.all
`,
			Test: "TestNamespaceGrantIsExact",
		},
		{
			Name: "a refusal in the default namespace names it empty",
			File: "auth.go",
			Old: `	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &DeniedError{`,
			New:  `	return &DeniedError{`,
			Test: "TestDeniedErrorNamesTheNamespace",
		},
	})
}

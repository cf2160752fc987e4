// Package mutant checks that a package's tests can fail: a Mutant is one
// deliberate bug, a change of one source file of the package, and the test
// named next to it must fail when the package is built with it. Each
// mutant is built apart, by a child go test with -overlay, so the code
// that ships holds no hook for it.
package mutant

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Mutant is one change of one source file of the package under test.
type Mutant struct {
	Name string
	// File is the source file, relative to the package's directory (a
	// test's working directory).
	File string
	// Old is replaced by New. Old must occur exactly once in File: a
	// mutant that no longer matches the code fails, to be brought up to
	// date with it.
	Old, New string
	// Test is the test that must catch the mutant, a top-level test
	// (or fuzz target) name.
	Test string
	// Caught, when set, must also be in the failing child's output: the
	// words of the check meant to catch the mutant, so that a failure of
	// another kind (an error, a panic) does not count.
	Caught string
}

// childEnv marks the child go test, whose mutant checks skip.
const childEnv = "LIMITERD_MUTANT_CHILD"

// timeout bounds one mutant's build and run (a store's fuzz seeds on a
// loaded host included).
const timeout = 5 * time.Minute

// Run checks each mutant in a subtest: the package built with it, its
// test must fail. It skips with -short, in a child it started, and
// without the go command. A child is built with -race when this test is.
func Run(t *testing.T, mutants []Mutant) {
	t.Helper()
	RunEnv(t, nil, mutants)
}

// RunEnv is Run with env (NAME=value) added to each child's environment:
// a store's address, say, so that the child uses the server this test
// found or started. A mutant whose test the child skips is skipped.
func RunEnv(t *testing.T, env []string, mutants []Mutant) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds every mutant: not with -short")
	}
	if os.Getenv(childEnv) != "" {
		t.Skip("in a mutant's child")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	for _, m := range mutants {
		t.Run(m.Name, func(t *testing.T) {
			check(t, goCmd, env, m)
		})
	}
}

func check(t *testing.T, goCmd string, env []string, m Mutant) {
	overlayFile := Overlay(t, m.File, m.Old, m.New)
	args := []string{"test", "-vet=off", "-count=1", "-overlay=" + overlayFile, "-run=^" + m.Test + "$", "-timeout=" + timeout.String()}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goCmd, append(args, ".")...)
	cmd.Env = append(append(os.Environ(), env...), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil && strings.Contains(string(out), "--- SKIP: "+m.Test) {
		t.Skipf("the child skipped %s; output:\n%s", m.Test, out)
	}
	if err == nil || !strings.Contains(string(out), "--- FAIL: "+m.Test+" ") || !strings.Contains(string(out), m.Caught) {
		t.Errorf("%s did not catch the mutant of %s (go test: %v); output:\n%s", m.Test, m.File, err, out)
		return
	}
	t.Logf("%s caught it (%s)", m.Test, time.Since(start).Round(time.Millisecond))
}

// Overlay writes file with old replaced by new to a temporary directory
// and returns an overlay file for go build -overlay that puts it in
// file's place. old must occur exactly once in file: a mutant that no
// longer matches the code fails, to be brought up to date with it.
func Overlay(t testing.TB, file, old, new string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), old); n != 1 {
		t.Fatalf("%s holds the text to change %d times, want once: bring the mutant up to date with the code:\n%s", file, n, old)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mutated := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(mutated, []byte(strings.Replace(string(src), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: mutated}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	return overlayFile
}

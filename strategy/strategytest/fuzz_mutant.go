package strategytest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// FuzzMutant is one deliberate bug in a store's own arithmetic: the one
// occurrence of From in File (relative to the package's directory)
// replaced by To. Target is the fuzz target whose smoke must catch it.
type FuzzMutant struct {
	Name, File, From, To, Target string
}

// CatchFuzzMutants proves the smoke can fail: for each mutant it runs the
// package in the current directory (a test's) again in a child go test,
// the mutated file laid over the original with -overlay, running only
// the mutant's target on its seeds and testdata (as CI does), and fails t
// unless that run fails with a difference found by Fuzz. env (NAME=value)
// is added to the child's environment: the test's server, so that the
// child finds the one this test found or started.
func CatchFuzzMutants(t *testing.T, env []string, mutants []FuzzMutant) {
	if testing.Short() {
		t.Skip("-short: each mutant builds the package again")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to build the mutants with")
		}
	}
	for _, m := range mutants {
		t.Run(m.Name, func(t *testing.T) {
			src, err := os.ReadFile(m.File)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(src), m.From); n != 1 {
				t.Fatalf("%s holds %q %d times, want once: the mutant is stale", m.File, m.From, n)
			}
			dir := t.TempDir()
			mutated := filepath.Join(dir, filepath.Base(m.File))
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(src), m.From, m.To, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(m.File)
			if err != nil {
				t.Fatal(err)
			}
			overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: mutated}})
			if err != nil {
				t.Fatal(err)
			}
			ov := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), gobin, "test", "-count=1", "-overlay="+ov,
				"-run=^"+m.Target+"$", "-timeout=5m", ".")
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err == nil && strings.Contains(string(out), "--- SKIP: "+m.Target) {
				t.Skipf("the child skipped %s; output:\n%s", m.Target, out)
			}
			if err == nil || !strings.Contains(string(out), "--- FAIL: "+m.Target+"/") || !strings.Contains(string(out), "last ops") {
				t.Errorf("%s did not catch the mutant %q (child error %v); output:\n%s", m.Target, m.Name, err, out)
			}
		})
	}
}

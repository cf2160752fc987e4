//go:build integration

package campaign

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestReleaseBuildHasNoClockHook: the clock offset the campaign sets
// exists only in builds with the tag faultclock; the release build (the
// harness's plain go build ./cmd/limiterd, as the Dockerfile's) has
// neither its code nor the variable's name.
func TestReleaseBuildHasNoClockHook(t *testing.T) {
	has := func(bin string) (symbol, name bool) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		syms, err := f.Symbols()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range syms {
			if s.Name == "main.(*offsetClock).Now" {
				symbol = true
			}
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		return symbol, bytes.Contains(data, []byte("LIMITERD_TEST_CLOCK_OFFSET_FILE"))
	}
	if sym, name := has(faultBinary(t)); !sym || !name {
		t.Fatalf("the faultclock build: hook %v, its variable %v; want both (the test looks for the wrong names)", sym, name)
	}
	if sym, name := has(harness.LimiterdBinary(t)); sym || name {
		t.Errorf("the release build has the clock hook (code %v, variable %v)", sym, name)
	}
}

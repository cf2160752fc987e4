// Command mutants runs gremlins' mutants one at a time: each one's file
// changed through go test -overlay, the package's tests run with
// -failfast under a timeout. It reads the mutant list that
// "gremlins unleash --dry-run" prints ("RUNNABLE CONDITIONALS_BOUNDARY at
// allow.go:61:23", "NOT COVERED ..." too: those run like the others) and
// prints one line per mutant: KILLED (with the first failing test), LIVED,
// TIMED OUT or NOT VIABLE (does not build). Run it from the module root:
//
//	gremlins unleash --dry-run ./sync > sync.list
//	nice -n 19 go run ./scripts/mutants -pkg ./sync < sync.list
//
// It covers the packages gremlins mis-runs (front/http, front/envoy and
// front/grpc, whose package is not named as their directory), the case
// conditions of tagless switches that gremlins calls not covered and never
// runs, and a run split in shards (-shard 2/3). A mutant that lived
// through the whole suite lives through it with tests added since unless
// they fail: -run with their names checks the survivors against them alone.
//
// -select runs, for each mutant, only the tests that ran its line: each
// test is run alone once, first, with a coverage profile. A mutant on a
// line that no test ran is NOT COVERED if it builds; one on a line
// outside every coverage block (the case conditions of tagless switches)
// runs the whole suite.
//
// A run that times out (a test hangs on the mutant, perhaps before one
// that would fail on it) is tried again one test at a time, each under
// 15 s: the first test that fails by itself kills the mutant.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// swaps is what gremlins v0.6.0 makes of each operator, per mutant type.
var swaps = map[string]map[token.Token]token.Token{
	"CONDITIONALS_BOUNDARY": {token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.LEQ: token.GTR, token.GTR: token.LEQ, token.GEQ: token.LSS},
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL},
	"INCREMENT_DECREMENT":   {token.INC: token.DEC, token.DEC: token.INC},
	"INVERT_NEGATIVES":      {token.SUB: token.ADD},
	"INVERT_LOGICAL":        {token.LAND: token.LOR, token.LOR: token.LAND},
}

var line = regexp.MustCompile(`([A-Z_]+) at (\S+\.go):(\d+):(\d+)`)

func main() {
	pkg := flag.String("pkg", "", "the package's directory, from the module root (./sync)")
	timeout := flag.Duration("timeout", 120*time.Second, "one mutant's build and test run")
	shard := flag.String("shard", "1/1", "run only the i-th of every n mutants (i/n)")
	only := flag.String("run", "", "run only the tests matching this (go test -run): to check survivors against tests added since")
	sel := flag.Bool("select", false, "run only the tests that ran the mutant's line (from one coverage run per test)")
	flag.Parse()
	var i, n int
	if _, err := fmt.Sscanf(*shard, "%d/%d", &i, &n); err != nil || n < 1 || i < 1 || i > n {
		fail(fmt.Errorf("-shard %q: want i/n with 1 ≤ i ≤ n", *shard))
	}
	if *pkg == "" {
		fail(errors.New("-pkg is required"))
	}
	dir, err := filepath.Abs(*pkg)
	if err != nil {
		fail(err)
	}
	tmp, err := os.MkdirTemp("", "mutants")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	var cov *coverage
	if *sel {
		if *only != "" {
			fail(errors.New("-select and -run: choose one"))
		}
		if cov, err = measure(dir, *pkg, tmp, *timeout); err != nil {
			fail(err)
		}
	}
	counts := map[string]int{}
	seen := map[string]bool{}
	k := 0
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		m := line.FindStringSubmatch(in.Text())
		if m == nil || seen[m[0]] {
			continue
		}
		seen[m[0]] = true
		k++
		if (k-1)%n != i-1 {
			continue
		}
		typ, file := m[1], m[2]
		ln, _ := strconv.Atoi(m[3])
		col, _ := strconv.Atoi(m[4])
		run1 := *only
		if cov != nil {
			tests, inBlock := cov.tests(filepath.Join(dir, file), ln, col)
			switch {
			case inBlock && len(tests) == 0:
				// Built with no test run: one that does not compile is
				// not viable, not uncovered.
				status, detail := run(dir, *pkg, tmp, typ, file, ln, col, *timeout, "^$")
				if status == "LIVED" {
					status, detail = "NOT COVERED", ""
				}
				counts[status]++
				fmt.Printf("%s %s %s:%d:%d %s\n", status, typ, file, ln, col, detail)
				continue
			case inBlock:
				run1 = "^(" + strings.Join(tests, "|") + ")$"
			}
		}
		status, detail := run(dir, *pkg, tmp, typ, file, ln, col, *timeout, run1)
		counts[status]++
		fmt.Printf("%s %s %s:%d:%d %s\n", status, typ, file, ln, col, detail)
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
	fmt.Printf("killed %d, lived %d, not covered %d, timed out %d, not viable %d, skipped %d\n",
		counts["KILLED"], counts["LIVED"], counts["NOT COVERED"], counts["TIMED OUT"], counts["NOT VIABLE"], counts["SKIPPED"])
}

// run builds and tests the package with one mutant.
func run(dir, pkg, tmp, typ, file string, ln, col int, timeout time.Duration, only string) (status, detail string) {
	path := filepath.Join(dir, file)
	src, err := os.ReadFile(path)
	if err != nil {
		return "SKIPPED", err.Error()
	}
	mutated, what, err := mutate(src, typ, ln, col)
	if err != nil {
		return "SKIPPED", err.Error()
	}
	changed := filepath.Join(tmp, "mutant.go")
	if err := os.WriteFile(changed, mutated, 0o644); err != nil {
		fail(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {path: changed}})
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, overlay, 0o644); err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	args := []string{"test", "-vet=off", "-count=1", "-failfast", "-timeout=" + timeout.String(), "-overlay=" + ovPath}
	if only != "" {
		args = append(args, "-run="+only)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), "LIMITERD_MUTANT_CHILD=1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	took := fmt.Sprintf("%s (%.0fs)", what, time.Since(start).Seconds())
	switch {
	case err == nil:
		return "LIVED", took
	case ctx.Err() != nil || bytes.Contains(out, []byte("panic: test timed out")):
		// A test that hangs on the mutant may come before one that fails
		// on it: run them one at a time, each under a short timeout.
		if name := failsAlone(dir, pkg, ovPath, tmp, only, timeout); name != "" {
			return "KILLED", took + " " + name + " (alone, the suite hangs)"
		}
		return "TIMED OUT", took
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "NOT VIABLE", took
	}
	if m := regexp.MustCompile(`--- FAIL: (\S+)`).FindSubmatch(out); m != nil {
		return "KILLED", took + " " + string(m[1])
	}
	return "KILLED", took + " " + firstLine(out)
}

// failsAlone builds the package's tests with the overlay and runs each
// test matching only (every test: "") alone under a short timeout; it
// returns the first that fails by itself rather than by the timeout.
func failsAlone(dir, pkg, ovPath, tmp, only string, timeout time.Duration) string {
	bin := filepath.Join(tmp, "alone.test")
	if err := exec.Command("go", "test", "-vet=off", "-c", "-o", bin, "-overlay="+ovPath, pkg).Run(); err != nil {
		return ""
	}
	list, err := exec.Command(bin, "-test.list=.*").Output()
	if err != nil {
		return ""
	}
	var re *regexp.Regexp
	if only != "" {
		re = regexp.MustCompile(only)
	}
	// The tests of these packages pass alone in well under a second; the
	// few that bound a hang give up after 10 s.
	const each = 15 * time.Second
	deadline := time.Now().Add(10 * time.Minute)
	for _, name := range strings.Fields(string(list)) {
		if re != nil && !re.MatchString(name) || time.Now().After(deadline) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), each+5*time.Second)
		cmd := exec.CommandContext(ctx, bin, "-test.run=^"+name+"$", "-test.count=1", "-test.timeout="+each.String())
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LIMITERD_MUTANT_CHILD=1")
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		expired := ctx.Err() != nil
		cancel()
		if err != nil && !expired && !bytes.Contains(out, []byte("panic: test timed out")) {
			return name
		}
	}
	return ""
}

// mutate swaps the operator at line ln, column col (both from 1, in bytes)
// as gremlins does for the mutant type typ.
func mutate(src []byte, typ string, ln, col int) ([]byte, string, error) {
	swap, ok := swaps[typ]
	if !ok {
		return nil, "", fmt.Errorf("mutant type %s unknown", typ)
	}
	fset := token.NewFileSet()
	f := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(f, src, nil, 0)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return nil, "", fmt.Errorf("no operator at %d:%d", ln, col)
		}
		p := fset.Position(pos)
		if p.Line != ln || p.Column != col {
			continue
		}
		to, ok := swap[tok]
		if !ok {
			return nil, "", fmt.Errorf("%s at %d:%d is not a %s operator", tok, ln, col, typ)
		}
		_ = lit
		off := f.Offset(pos)
		out := append(append(append([]byte{}, src[:off]...), to.String()...), src[off+len(tok.String()):]...)
		return out, tok.String() + " → " + to.String(), nil
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}

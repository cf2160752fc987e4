package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// block is one coverage block of a file, from its first to its last
// position (line, column), inclusive of the start.
type block struct {
	l0, c0, l1, c1 int
	tests          map[string]bool
}

// coverage is, per file (absolute path), its blocks and the tests that
// ran each.
type coverage struct {
	files  map[string][]*block
	always []string // tests that fail alone: run with every mutant
}

// measure builds the package's tests with coverage once and runs each
// top-level test alone, recording the blocks it ran.
func measure(dir, pkg, tmp string, timeout time.Duration) (*coverage, error) {
	list, err := exec.Command("go", "test", "-list", ".*", pkg).Output()
	if err != nil {
		return nil, fmt.Errorf("go test -list %s: %v", pkg, err)
	}
	bin := filepath.Join(tmp, "cover.test")
	if out, err := exec.Command("go", "test", "-c", "-cover", "-covermode=count", "-o", bin, pkg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go test -c -cover %s: %v\n%s", pkg, err, out)
	}
	cov := &coverage{files: map[string][]*block{}}
	index := map[string]*block{}
	module, err := modulePath()
	if err != nil {
		return nil, err
	}
	root, _ := os.Getwd()
	n := 0
	for _, name := range strings.Fields(string(list)) {
		if !(strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Example") || strings.HasPrefix(name, "Fuzz")) {
			continue
		}
		prof := filepath.Join(tmp, "cover.out")
		os.Remove(prof)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, bin, "-test.run=^"+name+"$", "-test.count=1", "-test.coverprofile="+prof)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LIMITERD_MUTANT_CHILD=1")
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			fmt.Printf("coverage: %s fails alone, so it runs with every mutant: %s\n", name, firstLine(out))
			cov.always = append(cov.always, name)
			continue
		}
		data, err := os.ReadFile(prof)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			// github.com/x/y/node/allow.go:61.2,63.16 2 1
			var file string
			var l0, c0, l1, c1, stmts, count int
			text := sc.Text()
			colon := strings.LastIndex(text, ":")
			if colon < 0 || strings.HasPrefix(text, "mode:") {
				continue
			}
			file = text[:colon]
			if _, err := fmt.Sscanf(text[colon+1:], "%d.%d,%d.%d %d %d", &l0, &c0, &l1, &c1, &stmts, &count); err != nil {
				continue
			}
			path := filepath.Join(root, strings.TrimPrefix(file, module+"/"))
			key := fmt.Sprintf("%s:%d.%d,%d.%d", path, l0, c0, l1, c1)
			b := index[key]
			if b == nil {
				b = &block{l0: l0, c0: c0, l1: l1, c1: c1, tests: map[string]bool{}}
				index[key] = b
				cov.files[path] = append(cov.files[path], b)
			}
			if count > 0 {
				b.tests[name] = true
			}
		}
		n++
	}
	fmt.Printf("coverage: %d tests run alone, %d blocks\n", n, len(index))
	return cov, nil
}

// tests returns the tests that ran the position, and whether any block
// holds it at all.
func (c *coverage) tests(path string, ln, col int) ([]string, bool) {
	set := map[string]bool{}
	in := false
	for _, b := range c.files[path] {
		if before(ln, col, b.l0, b.c0) || before(b.l1, b.c1, ln, col) {
			continue
		}
		in = true
		for t := range b.tests {
			set[t] = true
		}
	}
	if in {
		for _, t := range c.always {
			set[t] = true
		}
	}
	names := make([]string, 0, len(set))
	for t := range set {
		names = append(names, t)
	}
	sort.Strings(names)
	return names, in
}

func before(l0, c0, l1, c1 int) bool { return l0 < l1 || l0 == l1 && c0 < c1 }

func modulePath() (string, error) {
	out, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out)), nil
}

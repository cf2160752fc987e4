// Command protocheck fails when the public API (package limiter.v1 under
// api/proto) breaks a client built against an earlier version of it:
// limiter.v1 only gains fields, messages and RPCs.
//
//	go run ./scripts/protocheck [-against REF]
//
// It compiles the .proto files of the work tree and those of REF with
// protoc (scripts/generate.sh installs it) and compares the two descriptor
// sets. Without -against, REF is the merge base of HEAD and main
// (origin/main when the clone has it, else the local branch main); when
// that is HEAD itself, as on a clone of main, it is HEAD's parent. A REF
// without the API has nothing to break.
//
// A change is breaking when it removes or renames a message, enum,
// service or RPC; removes a field or enum value whose number the new
// version does not reserve; or changes a field's number, name, type,
// cardinality (singular, optional, repeated), JSON name or oneof, an enum
// value's name, or an RPC's request or response type or streaming.
//
// buf's breaking-change check covers the same ground, but building buf
// from a cold module cache took about 3 minutes of CI's time on a 2-core
// machine; this check needs only protoc and the protobuf runtime the
// module already has, and runs in under a second.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoRoot is where the API's .proto files live, relative to the
// repository root; imports not shipped with protoc are in its third_party.
const protoRoot = "api/proto"

// apiPackage is the protobuf package whose compatibility is checked.
const apiPackage = "limiter.v1"

func main() {
	against := flag.String("against", "", "git revision to compare with (default: the merge base of HEAD and main, or HEAD~1 on main itself)")
	flag.Parse()
	if err := run(*against); err != nil {
		fmt.Fprintln(os.Stderr, "protocheck:", err)
		os.Exit(1)
	}
}

func run(against string) error {
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if against == "" {
		if against, err = defaultBase(); err != nil {
			return err
		}
		if against == "" {
			fmt.Println("protocheck: no earlier revision to compare with; nothing to check")
			return nil
		}
	}
	tmp, err := os.MkdirTemp("", "protocheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	baseRoot := filepath.Join(tmp, "base")
	n, err := extract(against, baseRoot)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Printf("protocheck: %s has no %s: nothing to check\n", against, protoRoot)
		return nil
	}
	base, err := compile(filepath.Join(baseRoot, protoRoot), filepath.Join(tmp, "base.pb"))
	if err != nil {
		return fmt.Errorf("%s: %w", against, err)
	}
	cur, err := compile(protoRoot, filepath.Join(tmp, "current.pb"))
	if err != nil {
		return fmt.Errorf("work tree: %w", err)
	}
	problems := Compare(base, cur)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "protocheck:", p)
		}
		return fmt.Errorf("%d breaking change(s) to %s against %s", len(problems), apiPackage, against)
	}
	fmt.Printf("protocheck: %s compatible with %s\n", apiPackage, against)
	return nil
}

// defaultBase picks the revision to compare with, or "" when there is none.
func defaultBase() (string, error) {
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	var base string
	for _, ref := range []string{"origin/main", "main"} {
		if _, err := git("rev-parse", "--verify", "--quiet", ref+"^{commit}"); err != nil {
			continue
		}
		if b, err := git("merge-base", "HEAD", ref); err == nil {
			base = b
			break
		}
	}
	if base != "" && base != head {
		return base, nil
	}
	// On main itself (or with no main at all): the previous commit.
	if p, err := git("rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"); err == nil {
		return p, nil
	}
	return "", nil
}

// extract writes the files under protoRoot at rev into dir (keeping their
// paths) and returns how many .proto files there were.
func extract(rev, dir string) (int, error) {
	list, err := git("ls-tree", "-r", "--name-only", rev, "--", protoRoot)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range strings.Split(list, "\n") {
		if !strings.HasSuffix(name, ".proto") {
			continue
		}
		data, err := gitBytes("show", rev+":"+name)
		if err != nil {
			return 0, err
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// compile runs protoc over the API's own .proto files under root (not
// third_party) and returns the descriptors of every file it produced.
func compile(root, out string) (*descriptorpb.FileDescriptorSet, error) {
	var sources []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "third_party" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".proto") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			sources = append(sources, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(sources)
	args := []string{
		"-I", root,
		"-I", filepath.Join(root, "third_party"),
		// An older tree may lack an import that the current one ships.
		"-I", filepath.Join(protoRoot, "third_party"),
		"--include_imports", "--descriptor_set_out=" + out,
	}
	cmd := exec.Command("protoc", append(args, sources...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, errors.New("protoc not found: run scripts/generate.sh, which installs it")
		}
		return nil, fmt.Errorf("protoc: %v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(data, set); err != nil {
		return nil, err
	}
	return set, nil
}

func git(args ...string) (string, error) {
	out, err := gitBytes(args...)
	return strings.TrimSpace(string(out)), err
}

func gitBytes(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

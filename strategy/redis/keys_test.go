package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// decodeKey parses appendKey's output; it fails if the encoding is
// ambiguous for this input.
func decodeKey(s, prefix string) (tag string, k clustersync.WindowKey, ok bool) {
	rest, ok := strings.CutPrefix(s, prefix+":{")
	if !ok || len(rest) < tagLen+2 || rest[tagLen:tagLen+2] != "}:" {
		return "", k, false
	}
	tag, rest = rest[:tagLen], rest[tagLen+2:]
	field := func() (string, bool) {
		n, r, ok := strings.Cut(rest, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || len(r) < l+1 || r[l] != ':' {
			return "", false
		}
		rest = r[l+1:]
		return r[:l], true
	}
	if k.Namespace, ok = field(); !ok {
		return
	}
	if k.Key, ok = field(); !ok {
		return
	}
	size, start, ok := strings.Cut(rest, ":")
	sz, err1 := strconv.ParseInt(size, 10, 64)
	st, err2 := strconv.ParseInt(start, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return "", k, false
	}
	k.Size, k.Start = time.Duration(sz), st
	return tag, k, true
}

func FuzzKey(f *testing.F) {
	f.Add("limiterd", "api", "alice", int64(time.Second), int64(1_700_000_000_000_000_000))
	f.Add("p", "a:b", "{c}", int64(1), int64(-1))
	f.Add("p%7B", "", "}\x00 |", int64(0), int64(0))
	f.Add("a{b}", "1:x", "2:y:3", int64(100), int64(7))
	f.Fuzz(func(t *testing.T, prefix, ns, key string, size, start int64) {
		p := escapePrefix(prefix)
		if strings.ContainsAny(p, "{}") {
			t.Fatalf("escaped prefix %q holds a brace", p)
		}
		in := clustersync.WindowKey{Namespace: ns, Size: time.Duration(size), Start: start, Key: key}
		tag := keyTag(ns, key)
		s := string(appendKey(nil, p, tag, &in))
		gotTag, out, ok := decodeKey(s, p)
		if !ok || out != in || gotTag != string(tag[:]) {
			t.Fatalf("decode(%q) = %q %+v %v, want %q %+v", s, gotTag, out, ok, tag, in)
		}
		// Redis reads the hash tag between the first '{' and the next '}'.
		open := strings.IndexByte(s, '{')
		end := strings.IndexByte(s[open+1:], '}')
		if open != len(p)+1 || s[open+1:open+1+end] != string(tag[:]) {
			t.Fatalf("Redis would read the hash tag of %q wrongly", s)
		}
	})
}

func TestEscapePrefixInjective(t *testing.T) {
	seen := map[string]string{}
	for _, p := range []string{"a", "a{", "a%7B", "a%257B", "{}", "%7B%7D", "%", "%25"} {
		e := escapePrefix(p)
		if q, ok := seen[e]; ok {
			t.Errorf("prefixes %q and %q both escape to %q", q, p, e)
		}
		seen[e] = p
	}
}

func TestKeyBuilderAllocs(t *testing.T) {
	kb := keyBuilder{prefix: "limiterd"}
	k := clustersync.WindowKey{Namespace: "api", Size: time.Second, Start: 1_700_000_000_000_000_000, Key: "user-12345"}
	kb.build(&k)
	if n := testing.AllocsPerRun(100, func() { kb.build(&k) }); n > 1 {
		t.Errorf("build allocates %v times, want at most 1 (the key string)", n)
	}
}

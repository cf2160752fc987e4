package redis

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// decodeKey parses appendHashKey's output; it fails if the encoding is
// ambiguous for this input.
func decodeKey(s, prefix string) (tag string, id hashID, ok bool) {
	rest, ok := strings.CutPrefix(s, prefix+":{")
	if !ok || len(rest) < tagLen+2 || rest[tagLen:tagLen+2] != "}:" {
		return "", id, false
	}
	tag, rest = rest[:tagLen], rest[tagLen+2:]
	b, rest, ok := strings.Cut(rest, ":")
	bucket, err := strconv.Atoi(b)
	if !ok || err != nil {
		return "", id, false
	}
	n, r, ok := strings.Cut(rest, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || len(r) < l+1 || r[l] != ':' {
		return "", id, false
	}
	ns, rest := r[:l], r[l+1:]
	size, start, ok := strings.Cut(rest, ":")
	sz, err1 := strconv.ParseInt(size, 10, 64)
	st, err2 := strconv.ParseInt(start, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return "", id, false
	}
	return tag, hashID{namespace: ns, size: sz, start: st, bucket: bucket}, true
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
		k := clustersync.WindowKey{Namespace: ns, Size: time.Duration(size), Start: start, Key: key}
		in := hashOf(&k)
		if in.bucket < 0 || in.bucket >= buckets {
			t.Fatalf("bucket %d out of range", in.bucket)
		}
		s := redisKey(p, &k)
		tag := bucketTag(ns, in.bucket)
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
		// Fields: sums and rows never collide, whatever the key and inc.
		if sum, row := sumPrefix+key, rowPrefix(ns)+key; sum == row {
			t.Fatalf("sum and row fields of %q are both %q", key, sum)
		}
	})
}

func TestRowPrefixInjective(t *testing.T) {
	// (inc, key) pairs whose plain concatenation would collide.
	pairs := [][2]string{{"a", "bc"}, {"ab", "c"}, {"a:", "b"}, {"a", ":b"}, {"1:a", "b"}, {"", "1:a:b"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		f := rowPrefix(p[0]) + p[1]
		if q, ok := seen[f]; ok {
			t.Errorf("%q and %q share field %q", q, p, f)
		}
		seen[f] = p
	}
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

func TestBucketsSpread(t *testing.T) {
	// The keys of one namespace fill its buckets evenly.
	const n = 64_000
	var count [buckets]int
	for i := range n {
		count[bucketOf("api", "user-"+strconv.Itoa(i))]++
	}
	for b, c := range count {
		if c < n/buckets*8/10 || c > n/buckets*12/10 {
			t.Errorf("bucket %d holds %d of %d keys, want about %d", b, c, n, n/buckets)
		}
	}
}

// TestBucketOfIsFNV pins a key's bucket to FNV-1a 64 of "<len(ns)>:<ns>"
// and the key: a node of another version must place keys alike.
func TestBucketOfIsFNV(t *testing.T) {
	for _, c := range [][2]string{{"", ""}, {"api", "user-1"}, {"a:b", "c"}, {"ns", "ключ\x00{}"}, {strings.Repeat("n", 300), "k"}} {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d:%s%s", len(c[0]), c[0], c[1])
		if got, want := bucketOf(c[0], c[1]), int(h.Sum64()%buckets); got != want {
			t.Errorf("bucketOf(%q, %q) = %d, want %d", c[0], c[1], got, want)
		}
	}
}

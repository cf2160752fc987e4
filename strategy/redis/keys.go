package redis

import (
	"strconv"
	"strings"

	clustersync "github.com/limiterd/limiterd/sync"
)

// buckets is the number of hashes each window of a namespace is split
// into. A key's bucket is fixed, so all its windows share one hash tag
// (Allow's script may touch them together on a cluster) while a namespace
// spreads over this many slots. One push writes up to 100 rows of a bucket
// with one HMGET and one HSET, so a tick's rows of one window should fill
// buckets well: a 1000-row round trip holds about 16 rows per bucket.
const buckets = 64

// tagLen is the length of a hash tag: 16 hexadecimal digits.
const tagLen = 16

// fnv is FNV-1a 64, the hash of keys' buckets and of hash tags.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvNamespace(namespace string) uint64 {
	h := uint64(fnvOffset)
	var n [20]byte
	for _, c := range strconv.AppendUint(n[:0], uint64(len(namespace)), 10) {
		h = (h ^ uint64(c)) * fnvPrime
	}
	h = (h ^ ':') * fnvPrime
	for i := 0; i < len(namespace); i++ {
		h = (h ^ uint64(namespace[i])) * fnvPrime
	}
	return h
}

// bucketOf returns key's bucket in a namespace whose fnvNamespace is nsHash:
// FNV-1a 64 of the length-prefixed namespace followed by the key, modulo
// buckets.
func bucketOf(nsHash uint64, key string) int {
	h := nsHash
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * fnvPrime
	}
	return int(h % buckets)
}

// bucketTag returns the hash tag of a namespace's bucket: FNV-1a 64 of the
// length-prefixed namespace, ':' and the bucket number, as 16 lowercase
// hexadecimal digits. It only decides placement (slot, ring shard) and is
// never read back, so a collision merely puts two buckets in one slot. It
// never holds a brace, whatever the namespace holds.
func bucketTag(nsHash uint64, bucket int) [tagLen]byte {
	h := (nsHash ^ ':') * fnvPrime
	var n [4]byte
	for _, c := range strconv.AppendUint(n[:0], uint64(bucket), 10) {
		h = (h ^ uint64(c)) * fnvPrime
	}
	const hex = "0123456789abcdef"
	var t [tagLen]byte
	for i := tagLen - 1; i >= 0; i-- {
		t[i] = hex[h&0xf]
		h >>= 4
	}
	return t
}

// hashID names the hash holding one window of every key of a bucket.
type hashID struct {
	namespace string
	size      int64
	start     int64
	bucket    int
}

// appendHashKey appends the Redis key of hash id:
//
//	<prefix>:{<tag>}:<bucket>:<len(ns)>:<ns>:<size ns>:<start ns>
//
// prefix holds no brace, so the first '{' is the tag's and the first '}'
// after it ends the tag; the namespace is length-prefixed raw bytes, so
// any bytes (braces, colons, U+0000) are safe and distinct hashes never
// share a Redis key.
func appendHashKey(b []byte, prefix string, tag [tagLen]byte, id *hashID) []byte {
	b = append(b, prefix...)
	b = append(b, ":{"...)
	b = append(b, tag[:]...)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, int64(id.bucket), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(len(id.namespace)), 10)
	b = append(b, ':')
	b = append(b, id.namespace...)
	b = append(b, ':')
	b = strconv.AppendInt(b, id.size, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, id.start, 10)
	return b
}

// Fields of a window's hash, for key k: "=" + k holds the sum of every
// incarnation's total for k; rowPrefix(inc) + k holds inc's row. The row
// prefix is "+<len(inc)>:<inc>:", so (inc, k) pairs never share a field,
// and '=' and '+' keep sums and rows apart.
const sumPrefix = "="

func rowPrefix(inc string) string {
	return "+" + strconv.Itoa(len(inc)) + ":" + inc + ":"
}

// escapePrefix makes a key prefix brace-free, injectively: '%' '{' '}'
// become "%25" "%7B" "%7D". Config.Validate rejects braces outright; this
// protects prefixes handed to New directly.
func escapePrefix(p string) string {
	if !strings.ContainsAny(p, "%{}") {
		return p
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(p)
}

// locator finds the hashes of windows, hashing each namespace once for
// consecutive windows of the same namespace.
type locator struct {
	prefix string
	ns     string
	nsHash uint64
	valid  bool
}

// id returns the hash holding window k.
func (l *locator) id(k *clustersync.WindowKey) hashID {
	if !l.valid || l.ns != k.Namespace {
		l.ns, l.nsHash, l.valid = k.Namespace, fnvNamespace(k.Namespace), true
	}
	return hashID{namespace: k.Namespace, size: int64(k.Size), start: k.Start, bucket: bucketOf(l.nsHash, k.Key)}
}

// appendKey appends the Redis key of hash id.
func (l *locator) appendKey(b []byte, id *hashID) []byte {
	if !l.valid || l.ns != id.namespace {
		l.ns, l.nsHash, l.valid = id.namespace, fnvNamespace(id.namespace), true
	}
	return appendHashKey(b, l.prefix, bucketTag(l.nsHash, id.bucket), id)
}

// key returns the Redis key of the hash holding window k.
func (l *locator) key(k *clustersync.WindowKey) string {
	id := l.id(k)
	return string(l.appendKey(nil, &id))
}

// keyHashes returns the Redis keys of the hashes holding windows
// (size, start) of one (namespace, key), as slices of one string: the
// namespace and key are hashed once, and one allocation holds every name.
func keyHashes(prefix, namespace, key string, n int, window func(i int) (size, start int64)) []string {
	ends := make([]int, n)
	b := appendKeyHashes(make([]byte, 0, n*hashKeyLen(prefix, namespace)), prefix, namespace, key, ends, window)
	return cut(string(b), ends)
}

// hashKeyLen is about the length of one hash key, for a buffer's capacity.
func hashKeyLen(prefix, namespace string) int {
	return len(prefix) + len(namespace) + tagLen + 48
}

// appendKeyHashes appends the keys of the hashes holding windows
// window(i) of one (namespace, key) for i < len(ends), and sets ends[i] to
// the end of key i in b.
func appendKeyHashes(b []byte, prefix, namespace, key string, ends []int, window func(i int) (size, start int64)) []byte {
	nsHash := fnvNamespace(namespace)
	id := hashID{namespace: namespace, bucket: bucketOf(nsHash, key)}
	tag := bucketTag(nsHash, id.bucket)
	for i := range ends {
		id.size, id.start = window(i)
		b = appendHashKey(b, prefix, tag, &id)
		ends[i] = len(b)
	}
	return b
}

// cut splits all at ends (each the end of one part) into its parts, which
// share its memory.
func cut(all string, ends []int) []string {
	parts := make([]string, len(ends))
	lo := 0
	for i, hi := range ends {
		parts[i], lo = all[lo:hi], hi
	}
	return parts
}

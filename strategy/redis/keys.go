package redis

import (
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

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

// writeNamespace starts an FNV-1a 64 hash of a namespace's key or bucket
// with the length-prefixed namespace "<len>:<namespace>".
func writeNamespace(h hash.Hash64, namespace string) {
	var n [24]byte
	h.Write(append(strconv.AppendUint(n[:0], uint64(len(namespace)), 10), ':'))
	h.Write([]byte(namespace))
}

// bucketOf returns key's bucket in namespace: FNV-1a 64 of the
// length-prefixed namespace followed by the key, modulo buckets. It
// hashes in place, as hash/fnv would: a push computes it for every row.
func bucketOf(namespace, key string) int {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	var n [24]byte
	for _, c := range append(strconv.AppendUint(n[:0], uint64(len(namespace)), 10), ':') {
		h = (h ^ uint64(c)) * prime
	}
	for i := 0; i < len(namespace); i++ {
		h = (h ^ uint64(namespace[i])) * prime
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	return int(h % buckets)
}

// bucketTag returns the hash tag of a namespace's bucket: FNV-1a 64 of the
// length-prefixed namespace, ':' and the bucket number, as 16 lowercase
// hexadecimal digits. It only decides placement (slot, ring shard) and is
// never read back, so a collision merely puts two buckets in one slot. It
// never holds a brace, whatever the namespace holds.
func bucketTag(namespace string, bucket int) [tagLen]byte {
	h := fnv.New64a()
	writeNamespace(h, namespace)
	var n [24]byte
	h.Write(strconv.AppendUint(append(n[:0], ':'), uint64(bucket), 10))
	var t [tagLen]byte
	hex.Encode(t[:], binary.BigEndian.AppendUint64(n[:0], h.Sum64()))
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

// hashOf returns the hash holding window k.
func hashOf(k *clustersync.WindowKey) hashID {
	return hashID{namespace: k.Namespace, size: int64(k.Size), start: k.Start, bucket: bucketOf(k.Namespace, k.Key)}
}

// appendKey appends the Redis key of hash id under prefix.
func appendKey(b []byte, prefix string, id *hashID) []byte {
	return appendHashKey(b, prefix, bucketTag(id.namespace, id.bucket), id)
}

// redisKey returns the Redis key of the hash holding window k.
func redisKey(prefix string, k *clustersync.WindowKey) string {
	id := hashOf(k)
	return string(appendKey(nil, prefix, &id))
}

// keyHasher appends the Redis keys of the hashes holding the windows of
// one (namespace, key), hashing the namespace and key once.
type keyHasher struct {
	prefix string
	tag    [tagLen]byte
	id     hashID
}

func newKeyHasher(prefix, namespace, key string) keyHasher {
	b := bucketOf(namespace, key)
	return keyHasher{prefix: prefix, tag: bucketTag(namespace, b), id: hashID{namespace: namespace, bucket: b}}
}

// appendKey appends the Redis key of the hash holding window (size, start).
func (k *keyHasher) appendKey(b []byte, size time.Duration, start int64) []byte {
	k.id.size, k.id.start = int64(size), start
	return appendHashKey(b, k.prefix, k.tag, &k.id)
}

// hashKeyLen is about the length of one hash key, for a buffer's capacity.
func hashKeyLen(prefix, namespace string) int {
	return len(prefix) + len(namespace) + tagLen + 48
}

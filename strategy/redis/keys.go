package redis

import (
	"strconv"
	"strings"

	clustersync "github.com/limiterd/limiterd/sync"
)

// tagLen is the length of a key's hash tag: 16 hexadecimal digits.
const tagLen = 16

// keyTag returns the hash tag shared by every window of (namespace, key):
// FNV-1a 64 of the length-prefixed namespace followed by the key, as 16
// lowercase hexadecimal digits. The tag only decides placement (slot, ring
// shard); it is never read back, so a collision merely puts two keys in the
// same slot. It never holds a brace, whatever the key holds.
func keyTag(namespace, key string) [tagLen]byte {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var n [20]byte
	for _, c := range strconv.AppendUint(n[:0], uint64(len(namespace)), 10) {
		h = (h ^ uint64(c)) * prime
	}
	h = (h ^ ':') * prime
	for i := 0; i < len(namespace); i++ {
		h = (h ^ uint64(namespace[i])) * prime
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	const hex = "0123456789abcdef"
	var t [tagLen]byte
	for i := tagLen - 1; i >= 0; i-- {
		t[i] = hex[h&0xf]
		h >>= 4
	}
	return t
}

// appendKey appends the Redis key of window k:
//
//	<prefix>:{<tag>}:<len(ns)>:<ns>:<len(key)>:<key>:<size ns>:<start ns>
//
// prefix holds no brace, so the first '{' is the tag's and the first '}'
// after it ends the tag; the namespace and key are length-prefixed raw
// bytes, so any bytes (braces, colons, U+0000) are safe and distinct
// windows never share a Redis key.
func appendKey(b []byte, prefix string, tag [tagLen]byte, k *clustersync.WindowKey) []byte {
	b = append(b, prefix...)
	b = append(b, ":{"...)
	b = append(b, tag[:]...)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, int64(len(k.Namespace)), 10)
	b = append(b, ':')
	b = append(b, k.Namespace...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(len(k.Key)), 10)
	b = append(b, ':')
	b = append(b, k.Key...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(k.Size), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, k.Start, 10)
	return b
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

// keyBuilder builds the Redis keys of a batch, hashing each (namespace,
// key) once for consecutive windows of the same key.
type keyBuilder struct {
	prefix string
	buf    []byte
	ns     string
	key    string
	tag    [tagLen]byte
	valid  bool
}

// build returns k's Redis key and reports whether it shares the hash tag
// of the key built just before it.
func (kb *keyBuilder) build(k *clustersync.WindowKey) (key string, sameTag bool) {
	kb.buf, sameTag = kb.append(kb.buf[:0], k)
	return string(kb.buf), sameTag
}

// append appends k's Redis key to b, as build.
func (kb *keyBuilder) append(b []byte, k *clustersync.WindowKey) ([]byte, bool) {
	sameTag := kb.valid && kb.ns == k.Namespace && kb.key == k.Key
	if !sameTag {
		kb.ns, kb.key, kb.valid = k.Namespace, k.Key, true
		kb.tag = keyTag(k.Namespace, k.Key)
	}
	return appendKey(b, kb.prefix, kb.tag, k), sameTag
}

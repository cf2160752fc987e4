package node

import (
	"testing"
	"unsafe"
)

// TestShardFillsCacheLines: shards are laid out in an array; each must fill
// whole 64-byte cache lines so neighbouring shards' locks stay apart.
func TestShardFillsCacheLines(t *testing.T) {
	if got := unsafe.Sizeof(shard{}); got%64 != 0 {
		t.Errorf("unsafe.Sizeof(shard{}) = %d, want a multiple of 64", got)
	}
}

// TestEntryFitsOneLine: a key of up to 16 bytes with two window sizes
// keeps its entry, slots and key bytes in one 64-byte cache line.
func TestEntryFitsOneLine(t *testing.T) {
	if got := unsafe.Sizeof(entryBlock[[2]slot, [16]byte]{}); got != 64 {
		t.Errorf("unsafe.Sizeof(entryBlock[[2]slot, [16]byte]{}) = %d, want 64", got)
	}
}

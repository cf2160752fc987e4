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

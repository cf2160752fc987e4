package strategytest

import (
	"slices"
	"testing"

	"github.com/limiterd/limiterd/strategy/memory"
)

// TestBucketSeedsSpellTheExamples: the bucket seeds decode to the
// published examples, which answer as published: Smyte's RL.REDUCE
// twoPerMin 2 60 takes from 2 tokens, then 1, is refused at 0, and takes
// from 2 again a minute later (leaving 1, 0, 0, 1); Sidekiq's leaky(10,
// 10 s) admits ten calls within a second (1 to 10 drops), refuses the
// eleventh, and admits one after the next drip (10 drops again).
func TestBucketSeedsSpellTheExamples(t *testing.T) {
	seeds := bucketSeeds()
	sidekiq := []bucketAnswer{}
	for i := range 10 {
		sidekiq = append(sidekiq, bucketAnswer{true, int64(i+1) * hit})
	}
	sidekiq = append(sidekiq, bucketAnswer{false, 10 * hit}, bucketAnswer{true, 10 * hit})
	for _, tc := range []struct {
		name string
		data []byte
		want []bucketAnswer
	}{
		{"smyte", seeds[0], []bucketAnswer{{true, hit}, {true, 0}, {false, 0}, {true, hit}}},
		{"sidekiq", seeds[1], sidekiq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFuzzer(t, t.Context(), tc.data)
			x := newBucketFuzz(f, memory.New())
			for f.src.more() {
				x.step()
			}
			if !slices.Equal(x.answers, tc.want) {
				t.Errorf("answers (admitted, level after) = %v, want %v", x.answers, tc.want)
			}
		})
	}
}

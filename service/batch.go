package service

import (
	"context"
	"fmt"
)

// Batch serves the items of one batch call, in order. Each item is
// validated and answered on its own: a bad item gets its own error and the
// others are served. Items nearly always share a namespace, so the one
// resolved last is reused. A Batch is for one goroutine; its zero value is
// not usable: get one from Service.Batch.
type Batch struct {
	s    *Service
	last route
}

// Batch starts a batch of n items, refusing (as a whole, with a
// FieldError on "items") more than MaxBatchItems.
func (s *Service) Batch(n int) (Batch, error) {
	if n > MaxBatchItems {
		return Batch{}, &FieldError{Field: "items", Err: ErrInvalidValue,
			Reason: fmt.Sprintf("at most %d items per batch, got %d", MaxBatchItems, n)}
	}
	return Batch{s: s}, nil
}

// Increment is Service.Increment for one item.
func (b *Batch) Increment(ctx context.Context, req IncrementRequest, dst []Rate) ([]Rate, error) {
	return b.s.increment(ctx, req, &b.last, dst)
}

// Allow is Service.Allow for one item.
func (b *Batch) Allow(ctx context.Context, req AllowRequest, dst []LimitStatus) (Decision, error) {
	return b.s.allow(ctx, req, &b.last, dst)
}

// Sizes returns how many window sizes namespace has (0 when it is not
// configured): the rates an Increment of it without a window size answers,
// for sizing what a front builds its answers from.
func (b *Batch) Sizes(namespace string) int {
	r, err := b.s.resolve(namespace, &b.last)
	if err != nil {
		return 0
	}
	r.exit()
	return len(r.ns.Sizes())
}

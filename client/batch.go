package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// batcher gathers Allow calls into AllowBatch RPCs. It runs no goroutine of
// its own: a timer or the call that fills a batch sends it.
type batcher struct {
	c     *Client
	wait  time.Duration
	items int

	mu      sync.Mutex
	pending *batch
}

type batch struct {
	reqs    []*limiterv1.AllowRequest
	answers []chan answer
	timer   *time.Timer
}

type answer struct {
	resp *limiterv1.AllowResponse
	err  error
}

func (b *batcher) allow(ctx context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	ch := make(chan answer, 1) // buffered: the sender never blocks on a caller gone
	b.mu.Lock()
	p := b.pending
	if p == nil {
		p = &batch{}
		b.pending = p
		p.timer = time.AfterFunc(b.wait, func() { b.flush(p) })
	}
	p.reqs = append(p.reqs, req)
	p.answers = append(p.answers, ch)
	full := len(p.reqs) >= b.items
	if full {
		b.pending = nil
	}
	b.mu.Unlock()
	if full {
		p.timer.Stop()
		go b.send(p)
	}
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// flush sends p unless it was sent when it filled up.
func (b *batcher) flush(p *batch) {
	b.mu.Lock()
	if b.pending != p {
		b.mu.Unlock()
		return
	}
	b.pending = nil
	b.mu.Unlock()
	b.send(p)
}

func (b *batcher) send(p *batch) {
	var timeout time.Duration
	for _, r := range p.reqs {
		timeout = max(timeout, b.c.allowTimeout(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	resp, err := b.c.rpc.AllowBatch(ctx, &limiterv1.AllowBatchRequest{Items: p.reqs})
	cancel()
	results := resp.GetResults()
	for i, ch := range p.answers {
		switch {
		case err != nil:
			ch <- answer{err: err}
		case i >= len(results):
			ch <- answer{err: ErrBatchShort}
		case results[i].GetError() != nil:
			ch <- answer{err: status.ErrorProto(results[i].GetError())}
		default:
			ch <- answer{resp: results[i].GetResponse()}
		}
	}
}

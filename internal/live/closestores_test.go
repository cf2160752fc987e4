package live

import (
	"log/slog"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// stuckStore is a store whose Close blocks until release is closed, as a
// PostgreSQL pool's does while its server is cut off by the network.
type stuckStore struct {
	clustersync.Store
	closing chan struct{}
	release chan struct{}
}

func (s *stuckStore) Close() error {
	close(s.closing)
	<-s.release
	return nil
}

func TestCloseStoresDoesNotWaitForAStuckStore(t *testing.T) {
	st := &stuckStore{closing: make(chan struct{}), release: make(chan struct{})}
	defer close(st.release)
	o := New(Options{Log: slog.New(slog.DiscardHandler)})
	o.syncers["api"] = &liveSyncer{store: &openStore{name: "main", st: st}}
	returned := make(chan struct{})
	go func() {
		o.closeStoresWithin(10 * time.Millisecond)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("closeStoresWithin(10ms) still waits for a store whose Close blocks after 10s")
	}
	select {
	case <-st.closing:
	default:
		t.Fatal("the store's Close was not called")
	}
}

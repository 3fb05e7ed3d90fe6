package relaychild

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
)

// counterSource is the simulated source of the measured relay: every
// subscribed tag counts up, one update per emit, Good and stamped now. It
// holds no more per tag than a real source must (handle and count), so
// the process's memory is the relay's.
type counterSource struct {
	mu      sync.Mutex
	h       bridge.Handler
	handles []uint32
	counts  []uint64
	next    int // emitSome's position
	closed  bool
}

func (s *counterSource) Name() string { return "sim" }

func (s *counterSource) Start(ctx context.Context, h bridge.Handler) error {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
	h.HealthChanged(bridge.Health{State: bridge.StateConnected, Endpoint: "sim://sim", Level: 255, Writable: true})
	return nil
}

func (s *counterSource) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tags {
		if slices.Contains(s.handles, t.Handle) {
			continue // already subscribed: accepted again, not twice
		}
		s.handles = append(s.handles, t.Handle)
		s.counts = append(s.counts, 0)
	}
	return make([]error, len(tags)), nil
}

func (s *counterSource) Unsubscribe(ctx context.Context, tags []bridge.Tag) error {
	return errors.New("relaychild: the simulated source does not unsubscribe")
}

func (s *counterSource) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	return 0, bridge.ErrReadOnly
}

func (s *counterSource) Health() bridge.Health {
	return bridge.Health{State: bridge.StateConnected, Endpoint: "sim://sim", Level: 255, Writable: true}
}

func (s *counterSource) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func (s *counterSource) subscribed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.handles)
}

// emitSome sends one update for up to n tags, continuing where the last
// call stopped, and returns how many it sent.
func (s *counterSource) emitSome(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil || s.closed || len(s.handles) == 0 {
		return 0
	}
	now := time.Now()
	for range n {
		i := s.next % len(s.handles)
		s.next = i + 1
		s.counts[i]++
		s.h.Update(s.handles[i], wire.Update{Value: int64(s.counts[i]), Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	return n
}

// emitAll sends one update for every tag.
func (s *counterSource) emitAll() int {
	return s.emitSome(s.subscribed())
}

package sourcetest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
)

// Discard is a bridge.Handler that keeps nothing: for a test of a source's
// lifecycle alone (its Start and Close), without a bridge.
type Discard struct{}

// Update implements bridge.Handler.
func (Discard) Update(uint32, wire.Update) {}

// RefreshStart implements bridge.Handler.
func (Discard) RefreshStart(string) {}

// RefreshEnd implements bridge.Handler.
func (Discard) RefreshEnd() {}

// HealthChanged implements bridge.Handler.
func (Discard) HealthChanged(bridge.Health) {}

// Restored implements bridge.Handler.
func (Discard) Restored() {}

// What a probe answers as a LinkReporter.
const (
	probeRecovered   = 3
	probeRepublished = 41
)

var probeTags = []bridge.TagConfig{{Name: "p1", Address: "probe:1"}, {Name: "p2", Address: "probe:2"}}

// probe is a source without servers that implements every optional
// interface with values of its own, for the check that a wrapper forwards
// them. It counts each subscribed tag up every 50 ms.
type probe struct {
	name  string
	bound time.Duration

	mu     sync.Mutex
	h      bridge.Handler
	tags   map[uint32]int64
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *probe) Name() string                       { return p.name }
func (p *probe) SubscribeReplyBound() time.Duration { return p.bound }
func (p *probe) LinkRecoveries() (uint64, uint64)   { return probeRecovered, probeRepublished }
func (p *probe) Health() bridge.Health {
	return bridge.Health{State: bridge.StateConnected, Endpoint: "probe:", Level: 255}
}

func (p *probe) Start(_ context.Context, h bridge.Handler) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.h, p.tags, p.cancel, p.done = h, map[uint32]int64{}, cancel, make(chan struct{})
	p.mu.Unlock()
	h.HealthChanged(p.Health())
	go p.run(ctx)
	return nil
}

func (p *probe) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			for handle := range p.tags {
				p.tags[handle]++
				p.h.Update(handle, wire.Update{Value: p.tags[handle], Status: wire.StatusGood, SourceTime: now})
			}
			p.mu.Unlock()
		}
	}
}

func (p *probe) Subscribe(_ context.Context, tags []bridge.Tag) ([]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range tags {
		if _, ok := p.tags[t.Handle]; !ok {
			p.tags[t.Handle] = 0
		}
	}
	return make([]error, len(tags)), nil
}

func (p *probe) Unsubscribe(_ context.Context, tags []bridge.Tag) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range tags {
		delete(p.tags, t.Handle)
	}
	return nil
}

func (p *probe) Write(context.Context, bridge.Tag, any) (wire.StatusCode, error) {
	return 0, bridge.ErrReadOnly
}

func (p *probe) Close() error {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// CountStarts wraps src so that every call of its Start adds one to
// starts: for a test that a source was, or was not yet, started.
func CountStarts(src bridge.Source, starts *atomic.Int32) bridge.Source {
	return &startCounted{Source: src, starts: starts}
}

type startCounted struct {
	bridge.Source
	starts *atomic.Int32
}

func (s *startCounted) Start(ctx context.Context, h bridge.Handler) error {
	s.starts.Add(1)
	return s.Source.Start(ctx, h)
}

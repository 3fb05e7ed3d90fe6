package simsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
)

// Source is a bridge.Source that needs no server: it emits counter
// updates for its subscribed tags at a chosen rate, and its subscribe
// requests can be made slow, failing or unanswered, to test the bridge's
// subscribe-storm guard. Tags whose address starts with "bad:" fail to
// subscribe; tags whose address starts with "ro:" refuse writes.
type Source struct {
	name string

	mu          sync.Mutex
	h           bridge.Handler
	subscribed  map[uint32]bridge.Tag
	order       []uint32
	next        int // EmitSome's position in order
	delay       time.Duration
	failNext    int
	hang        bool
	health      bridge.Health
	writes      []Write
	started     bool
	closed      bool
	counts      map[uint32]uint64
	emitCancel  context.CancelFunc
	emitDone    chan struct{}
	subsStarted int
	// unsubscribed counts the tags Unsubscribe was given.
	unsubscribed int
	// down simulates a server that is unreachable: subscribes fail and
	// nothing is emitted.
	down bool

	live        map[*context.Context]context.Context
	maxInFlight atomic.Int64
	requests    atomic.Int64
}

// Write is a write a Source received.
type Write struct {
	Tag   bridge.Tag
	Value any
}

// New returns a source named name.
func New(name string) *Source {
	return &Source{
		name:       name,
		subscribed: map[uint32]bridge.Tag{},
		counts:     map[uint32]uint64{},
		live:       map[*context.Context]context.Context{},
		health:     bridge.Health{State: bridge.StateConnected, Endpoint: "sim://" + name, Level: 255, Writable: true},
	}
}

// Name implements bridge.Source.
func (s *Source) Name() string { return s.name }

// Start implements bridge.Source.
func (s *Source) Start(ctx context.Context, h bridge.Handler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("simsource: sim source started twice")
	}
	s.started, s.h = true, h
	h.HealthChanged(s.health)
	return nil
}

// SetSubscribeDelay makes each subscribe request take d before it answers.
func (s *Source) SetSubscribeDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// FailSubscribes makes the next n subscribe requests fail as a whole.
func (s *Source) FailSubscribes(n int) {
	s.mu.Lock()
	s.failNext = n
	s.mu.Unlock()
}

// HangSubscribes makes subscribe requests never answer (until their
// context ends) while on is true.
func (s *Source) HangSubscribes(on bool) {
	s.mu.Lock()
	s.hang = on
	s.mu.Unlock()
}

// Subscribe implements bridge.Source.
func (s *Source) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	s.requests.Add(1)
	s.mu.Lock()
	// In flight: arrived, not answered, and still awaited by the caller
	// (its context not ended).
	s.live[&ctx] = ctx
	n := int64(0)
	for _, c := range s.live {
		if c.Err() == nil {
			n++
		}
	}
	if n > s.maxInFlight.Load() {
		s.maxInFlight.Store(n)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, &ctx)
		s.mu.Unlock()
	}()
	s.mu.Lock()
	delay, hang := s.delay, s.hang
	fail := s.failNext > 0
	if fail {
		s.failNext--
	}
	s.subsStarted++
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if fail {
		return nil, errors.New("sim: subscribe failed")
	}
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return nil, errors.New("sim: server unreachable")
	}
	errs := make([]error, len(tags))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range tags {
		if len(t.Address) >= 4 && t.Address[:4] == "bad:" {
			errs[i] = fmt.Errorf("sim: unknown address %q", t.Address)
			continue
		}
		if _, ok := s.subscribed[t.Handle]; !ok {
			s.order = append(s.order, t.Handle)
		}
		s.subscribed[t.Handle] = t
	}
	return errs, nil
}

// Unsubscribe implements bridge.Source.
func (s *Source) Unsubscribe(ctx context.Context, tags []bridge.Tag) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := make(map[uint32]bool, len(tags))
	for _, t := range tags {
		delete(s.subscribed, t.Handle)
		gone[t.Handle] = true
	}
	s.order = slices.DeleteFunc(s.order, func(h uint32) bool { return gone[h] })
	s.unsubscribed += len(tags)
	return nil
}

// SubscribedTags returns the tags subscribed now, by name.
func (s *Source) SubscribedTags() map[string]bridge.Tag {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bridge.Tag, len(s.subscribed))
	for _, t := range s.subscribed {
		out[t.Name] = t
	}
	return out
}

// Unsubscribed returns how many tags Unsubscribe was given.
func (s *Source) Unsubscribed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unsubscribed
}

// Write implements bridge.Source.
func (s *Source) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.health.Writable {
		return 0, bridge.ErrNotWritableNow
	}
	if len(tag.Address) >= 3 && tag.Address[:3] == "ro:" {
		return wire.StatusBadNotWritable, nil
	}
	s.writes = append(s.writes, Write{Tag: tag, Value: v})
	return wire.StatusGood, nil
}

// Writes returns the writes received so far.
func (s *Source) Writes() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.writes...)
}

// SetHealth reports h to the bridge.
func (s *Source) SetHealth(h bridge.Health) {
	s.mu.Lock()
	s.health = h
	hd := s.h
	s.mu.Unlock()
	if hd != nil {
		hd.HealthChanged(h)
	}
}

// Health implements bridge.Source.
func (s *Source) Health() bridge.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// Down makes the source's simulated server unreachable, as a source whose
// servers are all down: it reports StateDown, refuses subscribes and
// emits nothing until Up.
func (s *Source) Down() {
	s.mu.Lock()
	s.down = true
	s.subscribed = map[uint32]bridge.Tag{}
	s.order = nil
	s.mu.Unlock()
	s.SetHealth(bridge.Health{State: bridge.StateDown, Endpoint: "sim://" + s.name, Level: -1, Detail: "sim: server unreachable"})
}

// Up brings the simulated server back: the source reports connected and
// asks for its subscriptions again (Restored).
func (s *Source) Up() {
	s.mu.Lock()
	s.down = false
	s.mu.Unlock()
	s.SetHealth(bridge.Health{State: bridge.StateConnected, Endpoint: "sim://" + s.name, Level: 255, Writable: true})
	s.Restore()
}

// Restore simulates a connection restored with its subscriptions lost.
func (s *Source) Restore() {
	s.mu.Lock()
	s.subscribed = map[uint32]bridge.Tag{}
	s.order = nil
	h := s.h
	s.mu.Unlock()
	if h != nil {
		h.Restored()
	}
}

// Subscribed returns how many tags are subscribed.
func (s *Source) Subscribed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subscribed)
}

// Requests returns how many subscribe requests arrived, and the most that
// were in flight (arrived, not answered, context not ended) at once.
func (s *Source) Requests() (total, maxInFlight int64) {
	return s.requests.Load(), s.maxInFlight.Load()
}

// EmitAll sends one update for every subscribed tag: the next value of its
// counter, Good, stamped now. It returns how many it sent.
func (s *Source) EmitAll() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil || s.closed {
		return 0
	}
	now := time.Now()
	for _, h := range s.order {
		s.counts[h]++
		s.h.Update(h, wire.Update{Value: int64(s.counts[h]), Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	return len(s.order)
}

// EmitSome sends one update for up to n subscribed tags, continuing where
// the previous call stopped and wrapping around, so that a caller can
// spread the tags evenly over time. It returns how many it sent.
func (s *Source) EmitSome(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil || s.closed || len(s.order) == 0 {
		return 0
	}
	now := time.Now()
	for i := 0; i < n; i++ {
		s.next %= len(s.order)
		h := s.order[s.next]
		s.next++
		s.counts[h]++
		s.h.Update(h, wire.Update{Value: int64(s.counts[h]), Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	return n
}

// Emit sends one update for the tag with the given handle.
func (s *Source) Emit(handle uint32, u wire.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil && !s.closed {
		s.h.Update(handle, u)
	}
}

// Refresh frames a snapshot of every subscribed tag's current count, as a
// source does after it switched servers.
func (s *Source) Refresh(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil || s.closed {
		return
	}
	s.h.RefreshStart(reason)
	now := time.Now()
	for _, h := range s.order {
		s.h.Update(h, wire.Update{Value: int64(s.counts[h]), Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	s.h.RefreshEnd()
}

// Run emits every subscribed tag once per period on a goroutine of its own,
// until Close.
func (s *Source) Run(period time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.emitCancel, s.emitDone = cancel, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.EmitAll()
			}
		}
	}()
}

// Counts returns the last value emitted for every handle.
func (s *Source) Counts() map[uint32]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint32]uint64, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// Close implements bridge.Source.
func (s *Source) Close() error {
	s.mu.Lock()
	cancel, done := s.emitCancel, s.emitDone
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.mu.Lock()
	s.closed = true
	s.health.State = bridge.StateClosed
	s.mu.Unlock()
	return nil
}

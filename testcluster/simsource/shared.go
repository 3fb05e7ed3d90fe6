package simsource

import (
	"context"
	"errors"
	"sync"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
)

// Shared is one source seen by several relays at once, as two hot-hot
// relays see the same OPC UA server pair: a source (a Source, or any
// bridge.Source) whose updates, refreshes and health reach every relay's
// bridge with identical values and timestamps, each relay on a goroutine
// of its own so that a slow or dead relay holds up no other. It records
// every update it produced, so that a test can compare a stream with it
// (ExpectedIDs, natstest.Audit).
//
// Drive it through Sim (Run, EmitAll, Refresh) and ReplayLast; give each
// bridge its own Relay.
type Shared struct {
	src bridge.Source
	sim *Source // src, when it is a simulation

	mu      sync.Mutex
	sync    bool
	relays  []*Relay
	started bool
	names   map[uint32]string
	last    map[uint32]wire.Update
	order   []uint32
	log     []produced
}

// produced is one update in the record: its tag and its message ID,
// worked out when it was produced. The record holds every update of a
// run (1.6 million in a two-minute edge outage) in the heap of the
// process that also runs the servers under test: without pointers it is
// not scanned by the garbage collector, which the whole update was.
type produced struct {
	handle uint32
	id     wire.IDSum
}

// NewShared returns a shared source named name over a new Source.
func NewShared(name string) *Shared {
	s := Share(New(name))
	return s
}

// Share shares any source (an OPCUASource on a test pair, say) the same
// way: src is started once, by the first relay, and closed by Close.
func Share(src bridge.Source) *Shared {
	s := &Shared{src: src, names: map[uint32]string{}, last: map[uint32]wire.Update{}}
	s.sim, _ = src.(*Source)
	return s
}

// Synchronous makes the source deliver to its relays on the simulation's
// own goroutine, one relay after the other, so that a relay that blocks
// (backpressure) holds the simulation up as it would a real source. Call it
// before the relays start.
func (s *Shared) Synchronous() *Shared {
	s.mu.Lock()
	s.sync = true
	s.mu.Unlock()
	return s
}

// Sim returns the simulation that produces the updates, or nil if the
// shared source is not a Source.
func (s *Shared) Sim() *Source { return s.sim }

// Name returns the source's name, the same for every relay.
func (s *Shared) Name() string { return s.src.Name() }

// Relay returns a new view of the source for one bridge.
func (s *Shared) Relay() *Relay {
	return &Relay{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Close stops the shared source. Relays are closed by their bridges.
func (s *Shared) Close() error { return s.src.Close() }

// fanLocked hands fs to every attached relay, in order: queued for each
// relay's goroutine, or, for a synchronous source, returned as a function
// that delivers them on the caller's goroutine once s.mu is released.
func (s *Shared) fanLocked(fs ...func(bridge.Handler)) (deliver func()) {
	if !s.sync {
		for _, r := range s.relays {
			for _, f := range fs {
				r.enqueue(f)
			}
		}
		return func() {}
	}
	relays := append([]*Relay(nil), s.relays...)
	return func() {
		for _, r := range relays {
			r.deliver(fs)
		}
	}
}

// Update implements bridge.Handler for the simulation: record, then fan
// out.
func (s *Shared) Update(handle uint32, u wire.Update) {
	s.mu.Lock()
	s.log = append(s.log, s.producedLocked(handle, u))
	if _, ok := s.last[handle]; !ok {
		s.order = append(s.order, handle)
	}
	s.last[handle] = u
	deliver := s.fanLocked(func(h bridge.Handler) { h.Update(handle, u) })
	s.mu.Unlock()
	deliver()
}

func (s *Shared) fan(f func(bridge.Handler)) {
	s.mu.Lock()
	deliver := s.fanLocked(f)
	s.mu.Unlock()
	deliver()
}

// RefreshStart implements bridge.Handler.
func (s *Shared) RefreshStart(reason string) {
	s.fan(func(h bridge.Handler) { h.RefreshStart(reason) })
}

// RefreshEnd implements bridge.Handler.
func (s *Shared) RefreshEnd() { s.fan(func(h bridge.Handler) { h.RefreshEnd() }) }

// HealthChanged implements bridge.Handler.
func (s *Shared) HealthChanged(hl bridge.Health) {
	s.fan(func(h bridge.Handler) { h.HealthChanged(hl) })
}

// Restored implements bridge.Handler.
func (s *Shared) Restored() { s.fan(func(h bridge.Handler) { h.Restored() }) }

// ReplayLast sends every tag's last update again, unchanged (same value,
// same timestamps), framed as a refresh: what the new server of an OPC UA
// pair sends after a failover when both servers carry the device's source
// timestamp. These are not new updates: a stream must not store them twice.
// It returns how many it sent.
func (s *Shared) ReplayLast(reason string) int {
	s.mu.Lock()
	fs := []func(bridge.Handler){func(h bridge.Handler) { h.RefreshStart(reason) }}
	for _, handle := range s.order {
		u := s.last[handle]
		fs = append(fs, func(h bridge.Handler) { h.Update(handle, u) })
	}
	fs = append(fs, func(h bridge.Handler) { h.RefreshEnd() })
	deliver := s.fanLocked(fs...)
	n := len(s.order)
	s.mu.Unlock()
	deliver()
	return n
}

// Produced returns how many updates the source produced (replays not
// counted).
func (s *Shared) Produced() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// ExpectedIDs returns the message ID of every update the source produced,
// by subject, in production order: what a stream fed by the relays must
// hold exactly once, in this order per subject. subject maps a tag name to
// its subject (Bridge.Subject).
func (s *Shared) ExpectedIDs(subject func(tag string) string) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for _, p := range s.log {
		subj := subject(s.names[p.handle])
		out[subj] = append(out[subj], p.id.String())
	}
	return out
}

// producedLocked records u of handle by its message ID.
func (s *Shared) producedLocked(handle uint32, u wire.Update) produced {
	u.Tag = s.names[handle]
	return produced{handle: handle, id: wire.MessageIDSum(s.src.Name(), &u)}
}

// Relay is one relay's view of a Shared: a bridge.Source.
type Relay struct {
	s *Shared

	mu      sync.Mutex
	h       bridge.Handler
	q       []func(bridge.Handler)
	busy    bool // a batch is being delivered
	started bool
	stopped bool
	wake    chan struct{}
	done    chan struct{}
	exited  chan struct{}
}

// Name implements bridge.Source: the shared source's name.
func (r *Relay) Name() string { return r.s.src.Name() }

// Start implements bridge.Source: attach, and start the simulation with
// the first relay.
func (r *Relay) Start(ctx context.Context, h bridge.Handler) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("simsource: shared relay started twice")
	}
	r.started, r.h = true, h
	r.exited = make(chan struct{})
	r.mu.Unlock()
	go r.run()
	s := r.s
	s.mu.Lock()
	s.relays = append(s.relays, r)
	first := !s.started
	s.started = true
	if !first && !s.sync {
		hl := s.src.Health()
		r.enqueue(func(h bridge.Handler) { h.HealthChanged(hl) })
	}
	sync := s.sync
	s.mu.Unlock()
	if first {
		return s.src.Start(ctx, s)
	}
	if sync {
		h.HealthChanged(s.src.Health())
	}
	return nil
}

// deliver runs fs on the caller's goroutine, unless the relay is stopped.
func (r *Relay) deliver(fs []func(bridge.Handler)) {
	r.mu.Lock()
	h, stopped := r.h, r.stopped
	if !stopped {
		r.busy = true
	}
	r.mu.Unlock()
	if stopped {
		return
	}
	defer func() {
		r.mu.Lock()
		r.busy = false
		r.mu.Unlock()
	}()
	for _, f := range fs {
		select {
		case <-r.done:
			return
		default:
		}
		f(h)
	}
}

// Idle reports that the relay has been handed everything the source
// produced so far: nothing queued, nothing being delivered.
func (r *Relay) Idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q) == 0 && !r.busy
}

func (r *Relay) enqueue(f func(bridge.Handler)) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.q = append(r.q, f)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Relay) run() {
	defer close(r.exited)
	var batch []func(bridge.Handler)
	for {
		r.mu.Lock()
		batch, r.q = r.q, batch[:0]
		h, stopped := r.h, r.stopped
		r.busy = len(batch) > 0 && !stopped
		r.mu.Unlock()
		if stopped {
			return
		}
		for i, f := range batch {
			select {
			case <-r.done:
				return
			default:
			}
			f(h)
			batch[i] = nil
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-r.wake:
		case <-r.done:
			return
		}
	}
}

// Subscribe implements bridge.Source on the shared simulation.
func (r *Relay) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	r.s.mu.Lock()
	for _, t := range tags {
		r.s.names[t.Handle] = t.Name
	}
	r.s.mu.Unlock()
	return r.s.src.Subscribe(ctx, tags)
}

// Unsubscribe implements bridge.Source. The tags stay subscribed for the
// other relays.
func (r *Relay) Unsubscribe(ctx context.Context, tags []bridge.Tag) error { return nil }

// Write implements bridge.Source.
func (r *Relay) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	return r.s.src.Write(ctx, tag, v)
}

// Health implements bridge.Source.
func (r *Relay) Health() bridge.Health { return r.s.src.Health() }

// Kill stops deliveries to this relay at once, dropping what is queued, as
// a relay process that dies loses what it had not relayed. It does not
// wait; Close does.
func (r *Relay) Kill() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.q = nil
	close(r.done)
	r.mu.Unlock()
	s := r.s
	s.mu.Lock()
	for i, x := range s.relays {
		if x == r {
			s.relays = append(s.relays[:i], s.relays[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

// Close implements bridge.Source: detach and wait for the relay's
// delivery goroutine. The simulation keeps running for the others.
func (r *Relay) Close() error {
	r.Kill()
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	if exited != nil {
		<-exited
	}
	return nil
}

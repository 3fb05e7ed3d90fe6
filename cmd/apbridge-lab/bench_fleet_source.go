package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/wire"
)

// fleetPlant is the fleet benchmarks' plant: pairs of tags that count up
// on one clock, whatever relay (if any) is attached to them. A relay that
// wins a pair's lease builds a view of it (a bridge.Source); the view is
// sent each tag's current value when it subscribes, as an OPC UA server
// sends a new subscription's first values, and then every change.
//
// The plant records every update it produced and whether a view had it
// (served): an update no relay ran a session for cannot reach the stream,
// and is counted apart (unserved) from one a relay had and lost (lost).
type fleetPlant struct {
	tags []bridge.TagConfig

	mu     sync.Mutex
	pairs  map[string]*plantPair
	order  []string
	cancel context.CancelFunc
	done   chan struct{}
}

type plantPair struct {
	name   string
	views  map[*plantView]bool
	count  []int64
	last   []wire.Update
	lastAt []int // index in log of each tag's last update
	// log is every update produced, with whether a view had it.
	log []plantUpdate
}

type plantUpdate struct {
	tag    int
	u      wire.Update
	served bool
}

func newFleetPlant(pairs, tags int) *fleetPlant {
	p := &fleetPlant{pairs: map[string]*plantPair{}}
	for i := range tags {
		p.tags = append(p.tags, bridge.TagConfig{Name: fmt.Sprintf("t%d", i), Address: fmt.Sprintf("a%d", i)})
	}
	for i := range pairs {
		name := fmt.Sprintf("pair%02d", i)
		p.pairs[name] = &plantPair{name: name, views: map[*plantView]bool{}, count: make([]int64, tags), last: make([]wire.Update, tags), lastAt: make([]int, tags)}
		p.order = append(p.order, name)
	}
	return p
}

// run ticks every pair's tags every period until stop.
func (p *fleetPlant) run(period time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, name := range p.order {
					p.tick(p.pairs[name])
				}
			}
		}
	}()
}

func (p *fleetPlant) stop() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
}

// tick counts every tag of pp up once and hands the updates to its views.
func (p *fleetPlant) tick(pp *plantPair) {
	now := time.Now()
	p.mu.Lock()
	var deliveries []func()
	for i := range pp.count {
		pp.count[i]++
		u := wire.Update{Value: pp.count[i], Status: wire.StatusGood, SourceTime: now, ServerTime: now}
		pp.last[i] = u
		served := false
		for v := range pp.views {
			if h, ok := v.handle(i); ok {
				served = true
				deliveries = append(deliveries, func() { v.deliver(h, u) })
			}
		}
		pp.lastAt[i] = len(pp.log)
		pp.log = append(pp.log, plantUpdate{i, u, served})
	}
	p.mu.Unlock()
	for _, d := range deliveries {
		d()
	}
}

// factory returns relay's source factory for a pair.
func (p *fleetPlant) factory(relay, name string) func() (bridge.Source, error) {
	return func() (bridge.Source, error) {
		return &plantView{p: p, pp: p.pairs[name], handles: map[int]uint32{}, owner: relay}, nil
	}
}

// expected returns the message IDs of the served updates by subject, and
// how many updates produced since the fault no view had.
func (p *fleetPlant) expected(subject func(pair, tag string) string, fault time.Time) (map[string][]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	unserved := 0
	for _, name := range p.order {
		for _, e := range p.pairs[name].log {
			if !e.served {
				if !e.u.SourceTime.Before(fault) {
					unserved++
				}
				continue
			}
			tag := p.tags[e.tag].Name
			u := e.u
			u.Tag = tag
			s := subject(name, tag)
			out[s] = append(out[s], wire.MessageID(name, &u))
		}
	}
	return out, unserved
}

// kill detaches every view of relay at once, as a relay process that dies
// stops taking updates.
func (p *fleetPlant) kill(relay string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pp := range p.pairs {
		for v := range pp.views {
			if v.owner == relay {
				delete(pp.views, v)
			}
		}
	}
}

// plantView is one relay's source on a pair.
type plantView struct {
	p  *fleetPlant
	pp *plantPair

	mu      sync.Mutex // serialises deliveries: the bridge wants one at a time
	h       bridge.Handler
	handles map[int]uint32 // tag index -> bridge handle; guarded by p.mu
	owner   string         // the relay that built it, for kill
}

func (v *plantView) Name() string { return v.pp.name }

func (v *plantView) Start(_ context.Context, h bridge.Handler) error {
	v.mu.Lock()
	v.h = h
	v.mu.Unlock()
	v.p.mu.Lock()
	v.pp.views[v] = true
	v.p.mu.Unlock()
	h.HealthChanged(bridge.Health{State: bridge.StateConnected, Level: 255, Endpoint: "plant://" + v.pp.name})
	return nil
}

// handle returns the bridge handle of tag i; p.mu is held.
func (v *plantView) handle(i int) (uint32, bool) {
	h, ok := v.handles[i]
	return h, ok
}

func (v *plantView) deliver(handle uint32, u wire.Update) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.h != nil {
		v.h.Update(handle, u)
	}
}

// Subscribe maps the tags and sends their current values.
func (v *plantView) Subscribe(_ context.Context, tags []bridge.Tag) ([]error, error) {
	errs := make([]error, len(tags))
	var first []func()
	v.p.mu.Lock()
	for j, t := range tags {
		i := -1
		for k, tc := range v.p.tags {
			if tc.Name == t.Name {
				i = k
			}
		}
		if i < 0 {
			errs[j] = errors.New("no such tag")
			continue
		}
		v.handles[i] = t.Handle
		if u := v.pp.last[i]; !u.SourceTime.IsZero() {
			v.pp.log[v.pp.lastAt[i]].served = true
			first = append(first, func() { v.deliver(t.Handle, u) })
		}
	}
	v.p.mu.Unlock()
	for _, f := range first {
		f()
	}
	return errs, nil
}

func (v *plantView) Unsubscribe(context.Context, []bridge.Tag) error { return nil }

func (v *plantView) Write(context.Context, bridge.Tag, any) (wire.StatusCode, error) {
	return 0, bridge.ErrReadOnly
}

func (v *plantView) Health() bridge.Health {
	return bridge.Health{State: bridge.StateConnected, Level: 255, Endpoint: "plant://" + v.pp.name}
}

// Close detaches the view.
func (v *plantView) Close() error {
	v.p.mu.Lock()
	delete(v.pp.views, v)
	v.p.mu.Unlock()
	v.mu.Lock()
	v.h = nil
	v.mu.Unlock()
	return nil
}

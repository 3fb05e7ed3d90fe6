package relay

import (
	"context"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
)

// Acknowledge after store in a fleet. A leased source's instance reports
// through a gatedHandler; when the bridge's handler is a
// bridge.StoreNotifier (it is), the instance gets a storeGatedHandler,
// which forwards AfterStored, so that an OPC UA source acknowledges a
// message to its server only once the sink stored its updates, as it does
// outside a fleet. The gate adds one rule: a mark acknowledges only while
// its generation is current and its lease valid when the sink confirms.
//
//   - The generation ended (the lease lost, the relay closing): the mark is
//     dropped, never called. The gate may have dropped updates of the
//     messages it covers, and the server must keep those messages for the
//     next owner, who takes the subscription over and asks for them again.
//   - The lease is not valid now (renewals late, within the fence margin of
//     its expiry): updates may have been dropped by the gate or refused by
//     the fenced sink, and the lease may be about to pass to another
//     relay. The mark is held, and every mark after it (acknowledgements
//     are cumulative). The next mark that finds the lease valid, or a
//     check every renewal period, releases them in order: the relay kept
//     its lease, so no successor will ask for those messages, and the
//     updates the gate dropped meanwhile are a loss it counted (fenced);
//     holding them longer would only stall the source at its unstored
//     limit. The generation ending first drops them.
//
// The JetStream sink's own fence refuses an update only when a newer
// owner stored the tag since; that owner took the subscription over
// first (a transfer moves it: the old session's acknowledgements no
// longer reach it) or made a new one with a refresh (a loss it counts).
// So a mark that covers a refused update may settle as stored.

// handlerFor returns the handler of generation gen's instance, whose
// context is ctx.
func (s *leasedSource) handlerFor(ctx context.Context, gen uint64) bridge.Handler {
	g := &gatedHandler{s: s, gen: gen}
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if sn, ok := h.(bridge.StoreNotifier); ok {
		return &storeGatedHandler{gatedHandler: g, sn: sn, ctx: ctx}
	}
	return g
}

// storeGatedHandler is a gatedHandler that forwards AfterStored under the
// rule above.
type storeGatedHandler struct {
	*gatedHandler
	sn  bridge.StoreNotifier
	ctx context.Context // ends with the generation

	mu       sync.Mutex
	held     []func() // marks confirmed while the lease was not valid, in order
	checking bool     // a recheck goroutine runs
}

var _ bridge.StoreNotifier = (*storeGatedHandler)(nil)

// AfterStored implements bridge.StoreNotifier.
func (g *storeGatedHandler) AfterStored(f func()) {
	if _, ok := g.live(); !ok {
		return
	}
	g.sn.AfterStored(func() { g.settle(f) })
}

// markVerdict is what settle does with a confirmed mark.
type markVerdict int

const (
	markAck  markVerdict = iota // call it, after the held ones
	markHold                    // hold it with the held ones
	markDrop                    // drop it and the held ones
)

// verdict is the rule: live says the mark's generation is current, valid
// that the lease is valid now.
func verdict(live, valid bool) markVerdict {
	switch {
	case !live:
		return markDrop
	case !valid:
		return markHold
	default:
		return markAck
	}
}

// settle applies the rule to f (nil: only the held marks) when the sink
// confirmed it.
func (g *storeGatedHandler) settle(f func()) {
	_, live := g.live()
	_, valid := g.s.f.valid(g.s.name)
	g.mu.Lock()
	var run []func()
	switch verdict(live, valid) {
	case markDrop:
		g.held = nil
	case markHold:
		if f != nil {
			g.held = append(g.held, f)
		}
		g.recheckLocked()
	case markAck:
		run = g.held
		g.held = nil
		if f != nil {
			run = append(run, f)
		}
	}
	g.mu.Unlock()
	for _, fn := range run {
		fn()
	}
}

// recheckLocked starts, unless one runs, the check that settles the held
// marks every renewal period until none are held: without it a source
// stalled at its unstored limit would bring no more marks to release
// them. g.mu is held.
func (g *storeGatedHandler) recheckLocked() {
	if g.checking || len(g.held) == 0 {
		return
	}
	// The source's Close moves the generation on under s.mu before it
	// waits for s.wg: a generation still current here may add to it.
	g.s.mu.Lock()
	current := g.s.gen == g.gen
	if current {
		g.s.wg.Add(1)
	}
	g.s.mu.Unlock()
	if !current {
		g.held = nil
		return
	}
	g.checking = true
	every := fleetRecheck(g.s.f.cfg.LeaseTTL)
	go func() {
		defer g.s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.ctx.Done():
				g.mu.Lock()
				g.held, g.checking = nil, false
				g.mu.Unlock()
				return
			case <-t.C:
			}
			g.settle(nil)
			g.mu.Lock()
			done := len(g.held) == 0
			if done {
				g.checking = false
			}
			g.mu.Unlock()
			if done {
				return
			}
		}
	}()
}

// fleetRecheck is how often held marks are checked: a renewal period.
func fleetRecheck(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Second
	}
	return max(ttl/4, 10*time.Millisecond)
}

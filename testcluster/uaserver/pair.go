package uaserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/testcluster/internal/ports"
	"github.com/gopcua/opcua/ua"
)

// Pair is a redundant pair of OPC UA servers, A and B, on loopback, each
// behind a faultproxy.Proxy, serving one simulated process: at every tick
// both servers serve the same tag values with the same source timestamps.
//
// Each server has a settable ServiceLevel (i=2267), a ServerArray (i=2254)
// listing both ApplicationUris, RedundancySupport (i=3709), a CurrentTime
// (i=2258) sampled at the heartbeat rate, and the tags under Objects/Sim in
// namespace 1 (SimNamespaceURI). Servers offer security None with
// anonymous users.
//
// The servers are built on gopcua's uacp and uasc packages with their own
// service layer: sessions, subscriptions and monitored items behave as OPC
// UA Part 4 asks rather than as gopcua v0.8.0's server package does (see
// docs/testcluster.md for the differences).
type Pair struct {
	cfg       config
	gen       []Tag // generated tags, by index
	setpoints []Tag
	byName    map[string]Tag
	servers   [2]*Server
	ports     ports.Blocks // the endpoints' ports, theirs until Close

	tick    atomic.Pointer[simTick]
	setVals []atomic.Pointer[setpointValue]

	wmu    sync.Mutex
	writes []Write
	wsig   chan struct{} // closed and replaced at each write

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// StartPair starts a pair on free loopback ports and returns once
// each server has answered a real client's read through its proxy.
//
// It returns the first error of opts, such as a value out of range, before
// it starts anything.
func StartPair(ctx context.Context, opts ...Option) (*Pair, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Pair{cfg: cfg, byName: make(map[string]Tag), wsig: make(chan struct{}), stop: make(chan struct{})}
	for i := range cfg.tags {
		k := TagKind(i % 4)
		t := Tag{Name: fmt.Sprintf("%s%04d", k, i), Kind: k, index: i}
		p.gen = append(p.gen, t)
		p.byName[t.Name] = t
	}
	p.setVals = make([]atomic.Pointer[setpointValue], cfg.setpoints)
	start := time.Now()
	for j := range cfg.setpoints {
		t := Tag{Name: fmt.Sprintf("%s%04d", TagSetpoint, j), Kind: TagSetpoint, index: j}
		p.setpoints = append(p.setpoints, t)
		p.byName[t.Name] = t
		p.setVals[j].Store(&setpointValue{v: ua.MustVariant(float64(0)), at: start})
	}
	p.tick.Store(newSimTick(p.gen, 0, start))
	for i := range p.servers {
		s, err := newServer(p, i)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.servers[i] = s
	}
	if cfg.partners {
		for i, s := range p.servers {
			o := p.servers[1-i]
			s.SetPartner(o.uri, o.endpoint)
		}
	}
	p.wg.Add(1)
	go p.run()
	wctx, cancel := context.WithTimeout(ctx, cfg.ReadyWait)
	defer cancel()
	var errs [2]error
	var wg sync.WaitGroup
	for i, s := range p.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.waitReady(wctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// run is the pair's clock: it ticks the simulated process, samples the
// servers' heartbeat and expires idle sessions. Everything it calls only
// queues work, so a stuck client cannot stall it.
func (p *Pair) run() {
	defer p.wg.Done()
	var tagC <-chan time.Time
	if len(p.gen) > 0 {
		t := time.NewTicker(p.cfg.tagInterval)
		defer t.Stop()
		tagC = t.C
	}
	hb := time.NewTicker(p.cfg.heartbeat)
	defer hb.Stop()
	hk := time.NewTicker(250 * time.Millisecond)
	defer hk.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tagC:
			// The tick's source time is read here, not taken from the
			// ticker: the runtime builds a ticker's value from a clock
			// read it cached before the send, so under load a value can
			// be later than the next one (golang/go#80893), and the
			// tags' source times would go back.
			p.advance(time.Now())
		case <-hb.C:
			for _, s := range p.servers {
				s.heartbeat()
			}
		case <-hk.C:
			now := time.Now()
			for _, s := range p.servers {
				s.eng.expireSessions(now)
			}
		}
	}
}

// advance moves the simulated process to its next tick, at now or, if
// the clock has not moved past the last tick, just after it: a tag's
// source time never goes back, whatever the clock does.
func (p *Pair) advance(now time.Time) {
	prev := p.tick.Load()
	if !now.After(prev.at) {
		now = prev.at.Add(time.Microsecond)
	}
	p.tick.Store(newSimTick(p.gen, prev.n+1, now))
	for _, s := range p.servers {
		if s.Running() {
			s.eng.notify(s.tagNodes...)
		}
	}
}

// A returns server A, the primary at start.
func (p *Pair) A() *Server { return p.servers[0] }

// B returns server B.
func (p *Pair) B() *Server { return p.servers[1] }

// Server returns server i: 0 is A, 1 is B. It panics for other i.
func (p *Pair) Server(i int) *Server { return p.servers[i] }

// Servers returns both servers, A first.
func (p *Pair) Servers() []*Server { return []*Server{p.servers[0], p.servers[1]} }

// Endpoints returns both servers' endpoints, A first.
func (p *Pair) Endpoints() []string {
	return []string{p.servers[0].Endpoint(), p.servers[1].Endpoint()}
}

// Tags returns the simulated tags, generated tags by index and then the
// setpoints.
func (p *Pair) Tags() []Tag {
	return append(append([]Tag(nil), p.gen...), p.setpoints...)
}

// Setpoints returns the writable tags.
func (p *Pair) Setpoints() []Tag { return append([]Tag(nil), p.setpoints...) }

// Tag returns the tag with the given name.
func (p *Pair) Tag(name string) (Tag, bool) {
	t, ok := p.byName[name]
	return t, ok
}

// Tick returns the number of the current tick of the simulated process
// (0 before the first tick).
func (p *Pair) Tick() uint64 { return p.tick.Load().n }

// Setpoint returns a setpoint's current value.
func (p *Pair) Setpoint(name string) (float64, bool) {
	t, ok := p.byName[name]
	if !ok || t.Kind != TagSetpoint {
		return 0, false
	}
	v, _ := p.setVals[t.index].Load().v.Value().(float64)
	return v, true
}

// Writes returns every write the servers have accepted, oldest first.
func (p *Pair) Writes() []Write {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return append([]Write(nil), p.writes...)
}

// WaitWrites waits until the servers have accepted at least n writes and
// returns them all, or returns ctx's error.
func (p *Pair) WaitWrites(ctx context.Context, n int) ([]Write, error) {
	for {
		p.wmu.Lock()
		if len(p.writes) >= n {
			w := append([]Write(nil), p.writes...)
			p.wmu.Unlock()
			return w, nil
		}
		sig := p.wsig
		p.wmu.Unlock()
		select {
		case <-sig:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// writeSetpoint records a write that server s accepted and serves the new
// value on both servers, which share the process.
func (p *Pair) writeSetpoint(s *Server, j int, v float64, src time.Time) {
	now := time.Now()
	if src.IsZero() {
		src = now
	}
	p.wmu.Lock()
	p.setVals[j].Store(&setpointValue{v: ua.MustVariant(v), at: src})
	p.writes = append(p.writes, Write{Server: s.name, Tag: p.setpoints[j].Name, Value: v, Source: src, At: now})
	close(p.wsig)
	p.wsig = make(chan struct{})
	p.wmu.Unlock()
	s.log.Info().Str("tag", p.setpoints[j].Name).Float64("value", v).Msg("uaserver: write")
	for _, srv := range p.servers {
		srv.eng.notify(srv.setpointNodes[j])
	}
}

// Close stops both servers, closes every connection and waits for every
// goroutine of the pair. It takes milliseconds, is idempotent, and may be
// called concurrently.
func (p *Pair) Close() {
	p.closeOnce.Do(func() {
		close(p.stop)
		p.wg.Wait()
		var wg sync.WaitGroup
		for _, s := range p.servers {
			if s == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.close()
			}()
		}
		wg.Wait()
		p.ports.Release()
	})
}

package uaclient

import (
	"context"
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Pair keeps an OPC UA client on the healthy server of a redundant pair:
// the supervisor that executes the Policy's decisions.
//
// It holds one gopcua client per endpoint, with AutoReconnect off: it
// builds and rebuilds sessions itself. The active endpoint's session
// carries the data items; the standby's session is kept warm, subscribed
// to its own ServiceLevel and heartbeat, so that a probe is a Read on a
// live session and a failover promotes a session that already exists.
// Both sessions have their own liveness: a heartbeat subscription on
// CurrentTime (i=2258) whose gaps count as a lost link, and a periodic
// ServiceLevel read with a short deadline.
//
// A promotion creates the data items on the new active (ModeWarm) or
// switches them to Reporting (ModeHot), reads the current value of every
// item, and delivers a snapshot (refresh start, one value per item,
// refresh end) before the old active's items are released: the data path
// is made before it is broken. Every new data path, the first connect and
// a new session on the same endpoint included, is framed the same way.
//
// A link blip costs no snapshot: a reconnect of the same endpoint as the
// active activates the lost session on a new connection (or transfers its
// subscriptions to a new session when the server forgot the session), and
// asks the server for what it sent into the broken connection
// (EventLinkRecovered). PairConfig.BlipToleranceMilliseconds sets how long
// a blip the session and subscriptions are asked to outlive.
//
// Each session keeps several Publish requests outstanding, and their
// answers arrive in any order; the Pair hands every subscription's
// notifications on in the order of their sequence numbers, holding a
// message that arrives ahead of a gap, asking the server again
// (Republish) for one that does not come, and reporting one it cannot
// have (EventNotificationsLost).
//
// Create a Pair with NewPair, add items with AddItems (before or after
// Start), Start it (it connects in the background: WaitReady waits for
// data), and Close it when done. All methods are safe for
// concurrent use. docs/servicelevel.md describes the timeline of every
// failover cause.
type Pair struct {
	set PairSettings
	opt options
	log zerolog.Logger
	pol *servicelevel.Policy
	out *output

	mu       sync.Mutex
	started  bool
	closed   bool
	preItems itemRegistry // items added before Start

	evc       chan event
	stop      chan struct{} // closed by Close
	loopDone  chan struct{} // closed when the loop has returned
	ready     chan struct{} // closed at the first promotion
	readyOnce sync.Once
	closeOnce sync.Once
	wg        sync.WaitGroup // sessions' goroutines

	statusMu sync.Mutex
	status   PairStatus
	lastErr  error // the last connect or session error, for WaitReady's error

	// Owned by the loop once started.
	sess        [2]*session
	serving     *session // the session whose data is delivered
	activating  *session // the session being promoted
	hold        *outOfServiceHold
	items       itemRegistry
	version     uint64
	epoch       uint64
	failovers   int
	nextID      uint64
	standbyAt   time.Time // no standby connect before this
	standbyWait time.Duration
	probeWait   probeWait
	waiters     []*waiter
	later       []func()
	tickedAt    time.Time // a policy deadline Tick did nothing at
	switchAt    time.Time
	remnants    [2]*remnant // by endpoint: a serving session that lost its link
	recoveries  int
	republished uint64
}

// NewPair validates cfg and returns a Pair that is not started yet. It does
// no I/O and starts no goroutine. The error joins every invalid field, each
// a *FieldError or *ValueError naming the field as written in the config,
// or wraps the first invalid option's error ("servicelevel: ..."). A nil
// option is skipped.
func NewPair(cfg PairConfig, opts ...PairOption) (*Pair, error) {
	set, err := cfg.Settings()
	if err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("servicelevel: %w", err)
		}
	}
	newPolicy := servicelevel.NewPolicy
	if set.Single {
		newPolicy = servicelevel.NewSinglePolicy
	}
	pol, err := newPolicy(cfg.FailoverConfig)
	if err != nil {
		return nil, err
	}
	p := &Pair{
		set:      set,
		opt:      o,
		log:      o.logger.With().Str("source", o.name).Logger(),
		pol:      pol,
		preItems: itemRegistry{},
		evc:      make(chan event, 256),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		ready:    make(chan struct{}),
	}
	p.status = PairStatus{Active: servicelevel.Primary, ActiveURL: set.Endpoints[servicelevel.Primary], Policy: pol.Status()}
	return p, nil
}

// Settings returns the resolved settings the Pair runs on.
func (p *Pair) Settings() PairSettings { return p.set }

// Start starts the Pair: it connects the primary endpoint as the active
// and the backup as the standby in the background, and from then on
// follows the Policy until Close. It returns at once: it never waits for a
// server, so that a pair whose servers are both down holds up nothing
// else. Ready tells when data flows; WaitReady waits for it. ctx is not
// kept: the Pair runs until Close.
func (p *Pair) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case p.started:
		return ErrStarted
	}
	p.started = true
	p.items = p.preItems
	p.preItems = nil
	p.out = newOutput(p.opt.onData, p.opt.onEvent, p.opt.backlog)
	go p.loop()
	return nil
}

// Ready returns a channel that is closed once data flows: the first
// snapshot, and what the first samples made of it, have reached the
// handlers.
func (p *Pair) Ready() <-chan struct{} { return p.ready }

// WaitReady waits until data flows (see Ready), the Pair is closed
// (ErrClosed) or ctx ends: then the error wraps ctx's error and names the
// last connect failure. The Pair keeps connecting after ctx ends.
func (p *Pair) WaitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.stop:
		return ErrClosed
	case <-ctx.Done():
	}
	select {
	case <-p.ready: // both ready: data flows
		return nil
	default:
	}
	p.statusMu.Lock()
	last := p.lastErr
	p.statusMu.Unlock()
	if last == nil {
		return fmt.Errorf("servicelevel: pair %s: no endpoint carries data yet: %w", p.opt.name, ctx.Err())
	}
	return fmt.Errorf("servicelevel: pair %s: no endpoint carries data yet (last error: %v): %w", p.opt.name, last, ctx.Err())
}

// Close stops the Pair: it closes both sessions and waits for every
// goroutine the Pair started, gopcua's included. Updates and events still
// queued are dropped; no handler runs after Close returns. Close is
// idempotent and may be called concurrently, but not from a handler.
func (p *Pair) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		started := p.started
		p.mu.Unlock()
		close(p.stop) // WaitReady returns ErrClosed
		if !started {
			return
		}
		<-p.loopDone
		p.wg.Wait()
		p.out.close()
	})
}

// Status returns a snapshot of the Pair.
func (p *Pair) Status() PairStatus {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	return p.status
}

// shutdown ends every session; Close waits for their goroutines.
func (p *Pair) shutdown() {
	for i, s := range p.sess {
		if s == nil {
			continue
		}
		s.conn.polite.Store(s.up())
		s.to(phaseDead)
		s.conn.cancel()
		p.sess[i] = nil
	}
	p.serving, p.activating = nil, nil
	p.publishStatus()
}

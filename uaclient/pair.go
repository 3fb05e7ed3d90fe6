package uaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"

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
// data), and Close it when done. All methods are safe for concurrent use.
// docs/servicelevel.md describes the timeline of every failover cause.
type Pair struct {
	set PairSettings
	opt options
	log zerolog.Logger
	pol *servicelevel.Policy
	out *output
	// store bounds the data messages handed on and not yet stored
	// (WithAckAfterStore); nil without.
	store *storeGate

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
	// What each endpoint's server said of itself at its latest session,
	// and the check of the pair made of it (redundancy.go).
	servers      [2]ServerInfo
	serversKnown [2]bool
	redundancy   RedundancyCheck
	// The endpoints' URLs: set.Endpoints, with a discovered partner's as
	// the backup's; single while there is no backup (partner.go).
	urls    [2]string
	single  bool
	partner partnerState
	handoff Handoff // the last one recorded
	// adopted are the items taken from a predecessor's handoff until the
	// first AddItems (takeover.go); nil: none.
	adopted            map[uint32]bool
	successorTransfers int
	successorFallbacks int
}

// NewPair validates cfg and returns a Pair that is not started yet. It does
// no I/O and starts no goroutine. The error joins every invalid field, each
// a *FieldError or *ValueError naming the field as written in the config,
// or wraps the first invalid option's error ("uaclient: ..."). A nil
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
			return nil, fmt.Errorf("uaclient: %w", err)
		}
	}
	newPolicy := servicelevel.NewPolicy
	if set.Single {
		newPolicy = servicelevel.NewSinglePolicy
	}
	pol, err := newPolicy(cfg.FailoverConfig, servicelevel.WithBlipWindow(set.BlipTolerance))
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
		urls:     set.Endpoints,
		single:   set.Single,
	}
	if set.DiscoverPartner {
		// No backup until one is found.
		p.urls[servicelevel.Backup] = ""
		p.partner.status.Enabled = true
	}
	p.status = PairStatus{Active: servicelevel.Primary, ActiveURL: set.Endpoints[servicelevel.Primary], Policy: pol.Status(),
		Partner: p.partner.status}
	return p, nil
}

// Settings returns the resolved settings the Pair runs on, as configured:
// a backup found by partner discovery is in Status().Partner.
func (p *Pair) Settings() PairSettings { return p.set }

// Start starts the Pair: it connects the primary endpoint as the active
// (or the endpoint of the predecessor's handoff, WithTakeover) and the
// other as the standby in the background, and from then on
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
	if p.opt.afterStore != nil {
		p.store = newStoreGate(p.opt.unstored)
	}
	p.startTakeover(time.Now())
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
		return fmt.Errorf("uaclient: pair %s: no endpoint carries data yet: %w", p.opt.name, ctx.Err())
	}
	return fmt.Errorf("uaclient: pair %s: no endpoint carries data yet (last error: %v): %w", p.opt.name, last, ctx.Err())
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
		// A successor takes the data subscription over: the session
		// closes without deleting it (WithKeepSubscriptionAtClose).
		s.conn.leave.Store(p.opt.keepAtClose && s.serves())
		s.to(phaseDead)
		s.conn.cancel()
		p.sess[i] = nil
	}
	p.serving, p.activating = nil, nil
	p.publishStatus()
}

// AddItems adds data items, keyed by their handles, and returns one result
// per item, in order. An item whose node ID does not parse, whose handle is
// in use, or whose node the active server rejects is not added: its result
// carries the error, and the other items are unaffected. When a session
// carries the data, AddItems waits until the items are created there, and
// their first values arrive as data changes; otherwise (before Start, or
// between sessions) the items are added at once and appear in the next
// snapshot. The error is for the call as a whole: ctx's, or ErrClosed.
func (p *Pair) AddItems(ctx context.Context, items []Item) ([]ItemResult, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if !p.started {
		defer p.mu.Unlock()
		results, _ := p.preItems.register(items, &p.set)
		return results, nil
	}
	p.mu.Unlock()
	w := &waiter{reply: make(chan []ItemResult, 1)}
	if err := p.call(ctx, evAddItems{items: items, w: w}); err != nil {
		return nil, err
	}
	select {
	case r := <-w.reply:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.loopDone:
		return nil, ErrClosed
	}
}

// RemoveItems removes the items with the given handles. When a session
// carries the data it waits until they are deleted there; no update for
// them is delivered after it returns. Unknown handles are reported in the
// error (wrapping ErrUnknownHandle); the others are removed anyway.
func (p *Pair) RemoveItems(ctx context.Context, handles []uint32) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if !p.started {
		defer p.mu.Unlock()
		return errors.Join(p.preItems.unregister(handles)...)
	}
	p.mu.Unlock()
	w := &waiter{done: make(chan error, 1)}
	if err := p.call(ctx, evRemoveItems{handles: handles, w: w}); err != nil {
		return err
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-p.loopDone:
		return ErrClosed
	}
}

// Write writes value (a Go value gopcua can put in a Variant: float64,
// int32, bool, string, ...) to the Value of the item with the given handle,
// on the active endpoint, and returns the server's status. The write is
// sent only while the active session carries the data and its current
// ServiceLevel is Healthy (200 or more); otherwise it is refused with a
// *WriteRefusedError (errors.Is(err, ErrWriteRefused)) and nothing is sent:
// a standby, a degraded server or one in maintenance is never written to.
// A status other than Good is also returned as the error.
func (p *Pair) Write(ctx context.Context, handle uint32, value any) (ua.StatusCode, error) {
	return p.write(ctx, writeTarget{handle: handle}, value)
}

// WriteNode is Write for a node given by its ID ("ns=1;s=Setpoint0000")
// rather than by an item's handle; the node need not be monitored.
func (p *Pair) WriteNode(ctx context.Context, nodeID string, value any) (ua.StatusCode, error) {
	return p.write(ctx, writeTarget{node: nodeID, byNode: true}, value)
}

func (p *Pair) write(ctx context.Context, t writeTarget, value any) (ua.StatusCode, error) {
	v, err := ua.NewVariant(value)
	if err != nil {
		return ua.StatusBadTypeMismatch, fmt.Errorf("uaclient: write: value %v (%T): %w", value, value, err)
	}
	p.mu.Lock()
	closed, started := p.closed, p.started
	p.mu.Unlock()
	switch {
	case closed:
		return ua.StatusBadNotConnected, ErrClosed
	case !started:
		return ua.StatusBadNotConnected, ErrNotStarted
	}
	reply := make(chan writeGrant, 1)
	if err := p.call(ctx, evWrite{t: t, reply: reply}); err != nil {
		return ua.StatusBadNotConnected, err
	}
	var g writeGrant
	select {
	case g = <-reply:
	case <-ctx.Done():
		// The loop may still grant it: take the grant back.
		go func() {
			select {
			case g := <-reply:
				if g.c != nil {
					g.c.release()
				}
			case <-p.loopDone:
			}
		}()
		return ua.StatusBadTimeout, ctx.Err()
	case <-p.loopDone:
		return ua.StatusBadNotConnected, ErrClosed
	}
	if g.err != nil {
		return ua.StatusBadNotConnected, g.err
	}
	defer g.c.release()
	return g.c.write(ctx, g.node, v)
}

// observe turns a Policy observation into an event.
func (p *Pair) observe(o servicelevel.Observation) {
	e := Event{At: o.At, Endpoint: o.Endpoint, Level: o.Level, FromBand: o.From, ToBand: o.To, Cause: o.Cause,
		Probe: o.Probe, Attempt: o.Attempt, Fast: o.Fast, Until: o.Until, Message: o.String()}
	switch o.Kind {
	case servicelevel.ActiveBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleActive
	case servicelevel.StandbyBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleStandby
	case servicelevel.StreakStarted:
		e.Kind = EventStreakStarted
	case servicelevel.StreakCleared:
		e.Kind = EventStreakCleared
	case servicelevel.ProbeAsked:
		e.Kind, e.Role = EventProbe, RoleStandby
	case servicelevel.ProbeAnswered:
		e.Kind, e.Role = EventProbeAnswered, RoleStandby
	case servicelevel.TriggerDeferred:
		e.Kind = EventTriggerDeferred
	case servicelevel.RetryScheduled:
		e.Kind = EventRetryScheduled
	default:
		return
	}
	p.emit(e)
}

// emit logs e and hands it to the event handler.
func (p *Pair) emit(e Event) {
	e.URL = p.urls[e.Endpoint]
	var le *zerolog.Event
	switch e.Kind {
	case EventConnectFailed, EventSessionLost, EventLevelUnreadable, EventItemFailed, EventNotificationsLost, EventRedundancyWarning,
		EventPartnerNotFound:
		le = p.log.Warn()
	case EventSameServer:
		le = p.log.Error() // a pair without a standby: someone has to act
	case EventProbe, EventProbeAnswered, EventRetryScheduled, EventConnecting:
		le = p.log.Debug()
	default:
		le = p.log.Info()
	}
	if e.Kind == EventTakeover && !e.Transferred {
		le = p.log.Warn() // logged once: what the server produced meanwhile is lost
	}
	if e.Kind == EventConnectFailed && isRefusal(e.Err) {
		le = p.log.Error() // a configuration or trust problem: someone has to act
	}
	if le.Enabled() {
		// The keys are the relay's log vocabulary: endpoint is the server's
		// URL, member which of the pair it is; levels are numbers (-1
		// unknown), durations in milliseconds.
		le = le.Str("event", e.Kind.String()).Str("endpoint", e.URL).Str("member", e.Endpoint.String())
		if e.Kind == EventFailover {
			le = le.Str("to", e.Target.String()).Str("cause", e.Cause.String()).
				Int("service_level", levelNumber(e.Level)).Int("peer_service_level", levelNumber(e.PeerLevel)).
				Float64("duration_ms", float64(e.Duration.Microseconds())/1000)
		}
		if e.Kind == EventLinkRecovered {
			le = le.Int("republished", e.Republished).Float64("after_ms", float64(e.Duration.Microseconds())/1000)
		}
		if e.ApplicationURI != "" {
			le = le.Str("application_uri", e.ApplicationURI)
		}
		if e.Kind == EventNotificationsLost {
			le = le.Uint32("subscription", e.Subscription).Str("missing", seqList(e.Missing))
		}
		if e.Err != nil {
			le = le.Err(e.Err)
		}
		le.Msg(e.Message)
	}
	// The handler reads Status when the event reaches it, on the output
	// goroutine, which can run before the loop publishes the status at the
	// end of its turn: publish it now, so that the event never arrives
	// with the status from before it. Otherwise a level change that is the
	// turn's last event leaves a handler's view stale until the next event
	// (a relay reported a healthy server as Degraded for minutes).
	p.publishStatus()
	p.out.event(e)
}

func (p *Pair) setLastErr(err error) {
	p.statusMu.Lock()
	p.lastErr = err
	p.statusMu.Unlock()
}

func (p *Pair) publishStatus() {
	ps := p.pol.Status()
	st := PairStatus{
		Active:      ps.Active,
		ActiveURL:   p.urls[ps.Active],
		Connected:   ps.Connected && p.serving != nil && p.serving.ep == ps.Active && p.activating == nil,
		Switching:   p.activating != nil || p.sess[ps.Active] != nil && p.sess[ps.Active].phase == phaseConnecting,
		Items:       len(p.items),
		Failovers:   p.failovers,
		Recoveries:  p.recoveries,
		Republished: p.republished,
		Policy:      ps,

		SuccessorTransfers: p.successorTransfers,
		SuccessorFallbacks: p.successorFallbacks,
	}
	if s := p.sess[ps.Active]; s != nil && s.up() {
		st.Link = s.conn.link
	}
	if s := p.sess[ps.Active]; s != nil && s.sampled {
		st.ActiveLevel = s.level
	}
	st.ActiveBand = st.ActiveLevel.Band()
	if s := p.sess[ps.Active.Other()]; s != nil && s.sampled {
		st.StandbyLevel = p.standbyLevel(s.level)
	}
	for e, known := range p.serversKnown {
		if known {
			st.Servers[e] = p.servers[e]
		}
	}
	st.Redundancy = p.redundancy
	st.Partner = p.partner.status
	for i, s := range p.sess {
		if s != nil {
			st.Sessions[i] = s.sessionState()
		}
	}
	p.statusMu.Lock()
	st.LastErr = p.lastErr
	p.status = st
	p.statusMu.Unlock()
}

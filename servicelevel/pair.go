package servicelevel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
// is made before it is broken. Every (re)establishment of the data path,
// the first connect and a reconnect of the same endpoint included, is
// framed the same way.
//
// Create a Pair with NewPair, add items with AddItems (before or after
// Start), Start it, and Close it when done. All methods are safe for
// concurrent use. docs/servicelevel.md describes the timeline of every
// failover cause.
type Pair struct {
	set PairSettings
	opt pairOptions
	log zerolog.Logger
	pol *Policy
	out *output

	mu       sync.Mutex
	started  bool
	closed   bool
	preItems map[uint32]*itemSpec // items added before Start

	evc       chan event
	stop      chan struct{} // closed by Close
	loopDone  chan struct{} // closed when the loop has returned
	ready     chan struct{} // closed at the first promotion
	readyOnce sync.Once
	closeOnce sync.Once
	wg        sync.WaitGroup // sessions' goroutines

	statusMu sync.Mutex
	status   PairStatus
	lastErr  error // the last connect or session error, for Start's error

	// Owned by the loop once started.
	sess        [2]*session
	serving     *session // the session whose data is delivered
	activating  *session // the session being promoted
	items       map[uint32]*itemSpec
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
}

type probeWait struct {
	id       ProbeID
	ep       Endpoint
	deadline time.Time
}

// waiter is an AddItems or RemoveItems call waiting for the active's
// worker to reach its desire.
type waiter struct {
	s       *session
	version uint64
	add     []int // indexes into results of the items added
	specs   []*itemSpec
	results []ItemResult
	reply   chan []ItemResult
	done    chan error // RemoveItems
	errs    []error
}

// NewPair validates cfg and returns a Pair that is not started yet. It does
// no I/O and starts no goroutine. The error joins every invalid field, each
// a *FieldError or *ValueError naming the field as written in the config,
// or is an option's error.
func NewPair(cfg PairConfig, opts ...PairOption) (*Pair, error) {
	set, err := cfg.Settings()
	if err != nil {
		return nil, err
	}
	o := defaultPairOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	pol, err := NewPolicy(cfg.FailoverConfig)
	if err != nil {
		return nil, err
	}
	p := &Pair{
		set:      set,
		opt:      o,
		log:      o.logger.With().Str("pair", o.name).Logger(),
		pol:      pol,
		preItems: map[uint32]*itemSpec{},
		evc:      make(chan event, 256),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		ready:    make(chan struct{}),
	}
	p.status = PairStatus{Active: Primary, ActiveURL: set.Endpoints[Primary], Policy: pol.Status()}
	return p, nil
}

// Settings returns the resolved settings the Pair runs on.
func (p *Pair) Settings() PairSettings { return p.set }

// Start starts the Pair: it connects the primary endpoint as the active
// and the backup as the standby, and from then on follows the Policy until
// Close. It returns when data flows (the first snapshot has been
// delivered), or when ctx ends first: then the error wraps ctx's error and
// names the last connect failure, and the Pair keeps connecting in the
// background until Close. ctx bounds only the wait, not the Pair.
func (p *Pair) Start(ctx context.Context) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return ErrClosed
	case p.started:
		p.mu.Unlock()
		return ErrStarted
	}
	p.started = true
	p.items = p.preItems
	p.preItems = nil
	p.out = newOutput(p.opt.onData, p.opt.onEvent, p.opt.backlog)
	p.mu.Unlock()
	go p.loop()
	select {
	case <-p.ready:
		return nil
	case <-p.loopDone:
		return ErrClosed
	case <-ctx.Done():
		p.statusMu.Lock()
		last := p.lastErr
		p.statusMu.Unlock()
		if last == nil {
			return fmt.Errorf("servicelevel: pair %s: no endpoint carries data yet: %w", p.opt.name, ctx.Err())
		}
		return fmt.Errorf("servicelevel: pair %s: no endpoint carries data yet (last error: %v): %w", p.opt.name, last, ctx.Err())
	}
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
		if !started {
			return
		}
		close(p.stop)
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
		results, _ := p.register(p.preItems, items)
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
		return errors.Join(unregister(p.preItems, handles)...)
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

type writeTarget struct {
	handle uint32
	node   string
	byNode bool
}

type writeGrant struct {
	s    *session
	node *ua.NodeID
	err  error
}

func (p *Pair) write(ctx context.Context, t writeTarget, value any) (ua.StatusCode, error) {
	v, err := ua.NewVariant(value)
	if err != nil {
		return ua.StatusBadTypeMismatch, fmt.Errorf("servicelevel: write: value %v (%T): %w", value, value, err)
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
				if g.s != nil {
					g.s.release()
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
	defer g.s.release()
	return g.s.write(ctx, g.node, v)
}

// call hands an API request to the loop.
func (p *Pair) call(ctx context.Context, ev event) error {
	select {
	case p.evc <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.loopDone:
		return ErrClosed
	}
}

// post hands a session's event to the loop; false once the loop is gone.
func (p *Pair) post(ev event) bool {
	select {
	case p.evc <- ev:
		return true
	case <-p.loopDone:
		return false
	}
}

// register validates items and adds them to reg; it returns the results
// and the specs added.
func (p *Pair) register(reg map[uint32]*itemSpec, items []Item) ([]ItemResult, []*itemSpec) {
	results := make([]ItemResult, len(items))
	var added []*itemSpec
	for i, it := range items {
		r := &results[i]
		r.Handle = it.Handle
		spec, err := p.specOf(it)
		switch {
		case err != nil:
			r.Err, r.Status = err, ua.StatusBadNodeIDInvalid
		case reg[it.Handle] != nil:
			r.Err = fmt.Errorf("item %d (%s): handle already in use (by %s)", it.Handle, it.NodeID, reg[it.Handle].nodeStr)
			r.Status = ua.StatusBadInvalidArgument
		default:
			reg[it.Handle] = spec
			added = append(added, spec)
			r.Status = ua.StatusBadWaitingForInitialData
		}
	}
	return results, added
}

func (p *Pair) specOf(it Item) (*itemSpec, error) {
	s := strings.TrimSpace(it.NodeID)
	if s == "" {
		return nil, fmt.Errorf("item %d: node ID is empty", it.Handle)
	}
	node, err := parseNodeID(s)
	if err != nil {
		return nil, fmt.Errorf("item %d: node ID %q: %w", it.Handle, it.NodeID, err)
	}
	spec := &itemSpec{handle: it.Handle, node: node, nodeStr: node.String(),
		sampling: p.set.SamplingInterval, queue: p.set.QueueSize}
	if it.SamplingInterval > 0 {
		spec.sampling = it.SamplingInterval
	}
	if it.QueueSize > 0 {
		spec.queue = it.QueueSize
	}
	return spec, nil
}

// parseNodeID is ua.ParseNodeID, which must never take the Pair down.
func parseNodeID(s string) (n *ua.NodeID, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("unparsable: %v", r)
		}
	}()
	return ua.ParseNodeID(s)
}

func unregister(reg map[uint32]*itemSpec, handles []uint32) []error {
	var errs []error
	for _, h := range handles {
		if reg[h] == nil {
			errs = append(errs, fmt.Errorf("item %d: %w", h, ErrUnknownHandle))
			continue
		}
		delete(reg, h)
	}
	return errs
}

// ---- the loop ----

type event any

type (
	evConnected struct {
		s   *session
		err error
	}
	evPublish struct {
		s            *session
		sub          uint32
		notes        []dataNote
		status       ua.StatusCode
		statusChange bool
		at           time.Time
	}
	evSessionErr struct {
		s   *session
		err error
	}
	evRead struct {
		s     *session
		kind  readKind
		probe ProbeID
		dv    *ua.DataValue
		err   error
	}
	evReconciled struct {
		s           *session
		version     uint64
		status      map[uint32]ua.StatusCode
		snapshot    []snapValue
		snapshotted bool
		err         error
	}
	evAddItems struct {
		items []Item
		w     *waiter
	}
	evRemoveItems struct {
		handles []uint32
		w       *waiter
	}
	evWrite struct {
		t     writeTarget
		reply chan writeGrant
	}
)

// loop owns the Policy, the sessions and the items: every decision is
// taken here, one event at a time, and no I/O is done here, so that no
// server, link or handler can hold a decision up.
func (p *Pair) loop() {
	defer close(p.loopDone)
	p.feed(p.pol.Start(time.Now()))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.settle()
		p.publishStatus()
		wake := time.Hour
		if at, ok := p.nextWake(); ok {
			wake = max(time.Until(at), 0)
		}
		timer.Reset(wake)
		select {
		case <-p.stop:
			p.shutdown()
			return
		case ev := <-p.evc:
			p.handle(ev)
		case <-timer.C:
			// Events that arrived meanwhile go first: a heartbeat waiting
			// in the queue is not a gap.
			for n := len(p.evc); n > 0; n-- {
				p.handle(<-p.evc)
			}
			p.onTimer(time.Now())
		}
	}
}

// settle runs what the last event made due: queued follow-ups, Policy
// deadlines, the standby's connect.
func (p *Pair) settle() {
	for range 1000 {
		if len(p.later) > 0 {
			f := p.later[0]
			p.later = p.later[1:]
			f()
			continue
		}
		now := time.Now()
		if at, ok := p.pol.NextDeadline(); ok && !at.After(now) && !at.Equal(p.tickedAt) {
			d := p.pol.Tick(now)
			if d.Action == ActionNone && len(d.Observations) == 0 {
				p.tickedAt = at
			}
			p.feed(d)
			continue
		}
		break
	}
	p.ensureStandby(time.Now())
}

func (p *Pair) nextWake() (time.Time, bool) {
	var at time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if d, has := p.pol.NextDeadline(); has && !d.Equal(p.tickedAt) {
		consider(d)
	}
	for _, s := range p.sess {
		if s == nil || s.state != SessionUp {
			continue
		}
		consider(s.lastBeat.Add(p.set.HeartbeatTimeout))
		consider(s.lastData.Add(s.dataQuiet))
		if !s.polling {
			consider(s.nextPoll)
		}
	}
	if p.probeWait.id != 0 {
		consider(p.probeWait.deadline)
	}
	if p.sess[p.pol.Active().Other()] == nil {
		consider(p.standbyAt)
	}
	return at, ok
}

func (p *Pair) onTimer(now time.Time) {
	// While the handlers are behind, the publishers hold back and the
	// subscriptions are silent on purpose: the gap checks stand down and
	// the polls alone watch the links.
	holding := p.out.full()
	for _, s := range p.sess {
		if s == nil || s.state != SessionUp {
			continue
		}
		if holding {
			s.lastBeat, s.lastData = now, now
		}
		if gap := now.Sub(s.lastBeat); gap >= p.set.HeartbeatTimeout {
			p.sessionLost(s, fmt.Errorf("heartbeat gap: nothing from the health subscription for %v (limit %v)",
				gap.Round(time.Millisecond), p.set.HeartbeatTimeout))
			continue
		}
		if gap := now.Sub(s.lastData); gap >= s.dataQuiet {
			p.sessionLost(s, fmt.Errorf("the data subscription is silent: no answer for %v (limit %v)",
				gap.Round(time.Millisecond), s.dataQuiet))
			continue
		}
		if !s.polling && !now.Before(s.nextPoll) {
			s.nextPoll = now.Add(p.set.PollInterval)
			if s.read(readPoll, 0) {
				s.polling = true
			}
		}
	}
	if w := p.probeWait; w.id != 0 && !now.Before(w.deadline) {
		p.probeWait = probeWait{}
		p.feed(p.pol.ProbeResult(now, w.id, Unknown()))
	}
}

func (p *Pair) handle(ev event) {
	now := time.Now()
	switch ev := ev.(type) {
	case evConnected:
		p.onConnected(ev, now)
	case evPublish:
		p.onPublish(ev, now)
	case evSessionErr:
		if !ev.s.dead {
			p.sessionLost(ev.s, ev.err)
		}
	case evRead:
		p.onRead(ev, now)
	case evReconciled:
		p.onReconciled(ev, now)
	case evAddItems:
		p.onAddItems(ev)
	case evRemoveItems:
		p.onRemoveItems(ev)
	case evWrite:
		p.onWrite(ev)
	}
}

// ---- decisions ----

// feed executes a Policy decision and reports what it observed.
func (p *Pair) feed(d Decision) {
	for _, o := range d.Observations {
		p.observe(o)
	}
	now := time.Now()
	switch d.Action {
	case ActionProbe:
		p.probe(d, now)
	case ActionSwitch:
		p.failovers++
		p.switchAt = now
		p.emit(Event{Kind: EventFailover, At: now, Endpoint: d.From, Target: d.To, Role: RoleActive,
			Level: d.ActiveLevel, PeerLevel: d.PeerLevel, Cause: d.Cause, Attempt: d.FailedAttempts, Message: d.String()})
		p.connectActive(d, now)
	case ActionConnect:
		p.switchAt = now
		p.connectActive(d, now)
	case ActionNone:
		if d.Cause != CauseNone {
			p.emit(Event{Kind: EventStay, At: now, Endpoint: d.From, Role: RoleActive, Level: d.ActiveLevel,
				PeerLevel: d.PeerLevel, Cause: d.Cause, Message: d.String()})
		}
	}
}

// connectActive makes d.To carry the data: it promotes the session there
// if one is up, lets one that is connecting finish first, or connects.
func (p *Pair) connectActive(d Decision, now time.Time) {
	s := p.sess[d.To]
	if s == nil {
		s = p.startSession(d.To, d.DialTimeout, d.Attempt, RoleActive, now)
	}
	s.activateOnUp = true
	s.activateCause = d.Cause
	s.attempt = d.Attempt
	if s.state == SessionUp {
		p.activate(s, now)
	}
}

func (p *Pair) probe(d Decision, now time.Time) {
	s := p.sess[d.To]
	switch {
	case s != nil && s.state == SessionUp && s.read(readProbe, d.Probe):
	case s != nil && s.state == SessionConnecting:
		// The standby is still connecting (at startup, or after it was
		// lost): it answers when it is up, or Unknown at the deadline.
		p.probeWait = probeWait{id: d.Probe, ep: d.To, deadline: now.Add(p.set.ReadTimeout)}
	default:
		id := d.Probe
		p.later = append(p.later, func() { p.feed(p.pol.ProbeResult(time.Now(), id, Unknown())) })
	}
}

// ensureStandby connects the standby endpoint when it has no session,
// with a backoff between failed attempts.
func (p *Pair) ensureStandby(now time.Time) {
	e := p.pol.Active().Other()
	if p.sess[e] != nil || now.Before(p.standbyAt) {
		return
	}
	p.startSession(e, p.set.Failover.ConnectTimeout, 0, RoleStandby, now)
}

func (p *Pair) startSession(e Endpoint, dialTimeout time.Duration, attempt int, role Role, now time.Time) *session {
	p.nextID++
	s := newSession(p, e, p.nextID, dialTimeout)
	s.attempt = attempt
	p.sess[e] = s
	msg := fmt.Sprintf("connecting %s %s (%s, dial timeout %v)", role, e, s.url, dialTimeout)
	if attempt > 0 {
		msg = fmt.Sprintf("connecting %s %s (%s, attempt %d, dial timeout %v)", role, e, s.url, attempt, dialTimeout)
	}
	p.emit(Event{Kind: EventConnecting, At: now, Endpoint: e, Role: role, Attempt: attempt, Message: msg})
	p.wg.Add(1)
	go s.run()
	return s
}

// ---- sessions ----

func (p *Pair) onConnected(ev evConnected, now time.Time) {
	s := ev.s
	if s.dead {
		return
	}
	if ev.err != nil {
		s.dead = true
		s.cancel()
		p.sess[s.ep] = nil
		p.setLastErr(fmt.Errorf("%s %s: %w", s.ep, s.url, ev.err))
		role := p.roleOf(s)
		p.emit(Event{Kind: EventConnectFailed, At: now, Endpoint: s.ep, Role: role, Attempt: s.attempt, Err: ev.err,
			Message: fmt.Sprintf("connect %s %s (%s) failed: %v", role, s.ep, s.url, ev.err)})
		p.answerProbeWait(s.ep, now)
		if s.activateOnUp {
			p.feed(p.pol.ConnectFailed(now))
		} else {
			p.backoffStandby(now)
		}
		return
	}
	s.state = SessionUp
	s.lastBeat, s.lastData = now, now
	s.nextPoll = now.Add(p.set.PollInterval)
	l, why := levelOf(s.initial)
	if !s.activateOnUp {
		p.standbyWait = 0
		p.emit(Event{Kind: EventSessionUp, At: now, Endpoint: s.ep, Role: RoleStandby, Level: l,
			Message: fmt.Sprintf("%s session up (standby, %s)", s.ep, levelText(l, why))})
	}
	p.onLevel(s, l, why, now)
	if s.activateOnUp {
		p.activate(s, now)
	} else {
		p.pushDesires()
	}
	if w := p.probeWait; w.id != 0 && w.ep == s.ep {
		p.probeWait = probeWait{}
		if !s.read(readProbe, w.id) {
			p.feed(p.pol.ProbeResult(now, w.id, Unknown()))
		}
	}
}

func (p *Pair) answerProbeWait(e Endpoint, now time.Time) {
	if w := p.probeWait; w.id != 0 && w.ep == e {
		p.probeWait = probeWait{}
		p.feed(p.pol.ProbeResult(now, w.id, Unknown()))
	}
}

func (p *Pair) backoffStandby(now time.Time) {
	p.standbyWait = min(max(2*p.standbyWait, 100*time.Millisecond), p.set.Failover.ReconnectDelay)
	p.standbyAt = now.Add(p.standbyWait)
}

func (p *Pair) roleOf(s *session) Role {
	if s.ep == p.pol.Active() {
		return RoleActive
	}
	return RoleStandby
}

// sessionLost ends s and tells the Policy what that means.
func (p *Pair) sessionLost(s *session, err error) {
	if s.dead {
		return
	}
	now := time.Now()
	s.dead = true
	s.cancel()
	p.sess[s.ep] = nil
	p.setLastErr(fmt.Errorf("%s %s: %w", s.ep, s.url, err))
	role := p.roleOf(s)
	p.emit(Event{Kind: EventSessionLost, At: now, Endpoint: s.ep, Role: role, Level: s.level, Err: err,
		Message: fmt.Sprintf("%s session on %s lost: %v", role, s.ep, err)})
	wasServing, wasActivating := s.serving, s.activating
	if wasServing {
		p.serving = nil
	}
	if wasActivating {
		p.activating = nil
	}
	p.releaseWaiters(s)
	p.answerProbeWait(s.ep, now)
	if s.ep == p.pol.Active() {
		switch {
		case wasActivating || s.activateOnUp && !wasServing:
			p.feed(p.pol.ConnectFailed(now))
		case wasServing:
			p.feed(p.pol.LinkLost(now))
		}
		return
	}
	p.feed(p.pol.StandbyLevel(now, Unknown()))
	p.backoffStandby(now)
}

// onLevel takes one ServiceLevel sample of s.
func (p *Pair) onLevel(s *session, l Level, why string, now time.Time) {
	s.level, s.sampled = l, true
	switch {
	case l.Known():
		s.levelProblem = ""
	case why != s.levelProblem:
		s.levelProblem = why
		role := p.roleOf(s)
		p.emit(Event{Kind: EventLevelUnreadable, At: now, Endpoint: s.ep, Role: role, Reason: why,
			Message: fmt.Sprintf("%s (%s) ServiceLevel is unreadable (%s): counted as unknown", s.ep, role, why)})
	}
	if s.ep != p.pol.Active() {
		p.feed(p.pol.StandbyLevel(now, l))
		return
	}
	if s.serving {
		p.feed(p.pol.ActiveLevel(now, l))
	}
	// A session being promoted keeps the sample for SessionUp.
}

func (p *Pair) onPublish(ev evPublish, now time.Time) {
	s := ev.s
	if s.dead {
		return
	}
	switch ev.sub {
	case s.healthSub:
		s.lastBeat = ev.at
		if ev.statusChange {
			p.sessionLost(s, fmt.Errorf("the health subscription ended (%v)", ev.status))
			return
		}
		for _, n := range ev.notes {
			if n.handle == handleServiceLevel {
				l, why := levelOf(n.dv)
				p.onLevel(s, l, why, now)
				if s.dead {
					return
				}
			}
		}
	case s.dataSub:
		s.lastData = ev.at
		if ev.statusChange {
			p.sessionLost(s, fmt.Errorf("the data subscription ended (%v)", ev.status))
			return
		}
		switch {
		case s.serving:
			p.deliver(s, ev.notes)
		case s.activating:
			s.buffered = append(s.buffered, ev.notes...)
		}
	}
}

func (p *Pair) onRead(ev evRead, now time.Time) {
	s := ev.s
	if ev.kind == readPoll {
		s.polling = false
	}
	if s.dead {
		if ev.kind == readProbe {
			p.feed(p.pol.ProbeResult(now, ev.probe, Unknown()))
		}
		return
	}
	if ev.err != nil {
		if ev.kind == readProbe {
			p.feed(p.pol.ProbeResult(now, ev.probe, Unknown()))
		}
		p.sessionLost(s, ev.err)
		return
	}
	l, why := levelOf(ev.dv)
	if ev.kind == readPoll {
		p.onLevel(s, l, why, now)
		return
	}
	s.level, s.sampled = l, true
	if !l.Known() && why != s.levelProblem {
		s.levelProblem = why
		p.emit(Event{Kind: EventLevelUnreadable, At: now, Endpoint: s.ep, Role: p.roleOf(s), Reason: why,
			Message: fmt.Sprintf("%s ServiceLevel is unreadable (%s): the probe counts it as unknown", s.ep, why)})
	}
	p.feed(p.pol.ProbeResult(now, ev.probe, l))
}

// ---- items and promotion ----

// itemList returns the registered items in handle order.
func (p *Pair) itemList() []itemSpec {
	out := make([]itemSpec, 0, len(p.items))
	for _, it := range p.items {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b itemSpec) int {
		switch {
		case a.handle < b.handle:
			return -1
		case a.handle > b.handle:
			return 1
		}
		return 0
	})
	return out
}

// activate starts the promotion of s: its items are created (or switched
// to Reporting) and read; onReconciled completes it.
func (p *Pair) activate(s *session, now time.Time) {
	s.activating = true
	s.activateAt = now
	p.activating = s
	p.pushDesires()
}

// pushDesires tells every live session which items it must have: all of
// them, Reporting, on the active (with a snapshot while it is promoted);
// all of them, Sampling, on a Hot standby; none on a Warm standby.
func (p *Pair) pushDesires() {
	items := p.itemList()
	for _, s := range p.sess {
		if s == nil || s.dead || s.state != SessionUp {
			continue
		}
		p.version++
		s.wantVer = p.version
		d := desire{version: p.version, items: items, mode: ua.MonitoringModeReporting}
		switch {
		case s.activating:
			d.snapshot = true
			s.activationVer = p.version
		case s.serving:
		case p.set.Mode == ModeHot:
			d.mode = ua.MonitoringModeSampling
		default:
			d.items = nil
		}
		s.setDesire(d)
	}
}

func (p *Pair) onReconciled(ev evReconciled, now time.Time) {
	s := ev.s
	if s.dead {
		return
	}
	if ev.err != nil {
		p.sessionLost(s, ev.err)
		return
	}
	p.answerWaiters(s, ev)
	if s.activating && ev.snapshotted && ev.version >= s.activationVer {
		p.promoted(s, ev, now)
	}
}

// promoted completes a promotion: the snapshot is delivered, then the
// data notifications that arrived meanwhile, then the old active is
// released and the Policy learns that the new active is up.
func (p *Pair) promoted(s *session, ev evReconciled, now time.Time) {
	p.epoch++
	cause := s.activateCause
	p.out.data(Update{Kind: UpdateRefreshStart, Epoch: p.epoch, Endpoint: s.ep, Cause: cause, Items: len(ev.snapshot), Received: now})
	s.fence = make(map[uint32]*ua.DataValue, len(ev.snapshot))
	var failed []snapValue
	for _, v := range ev.snapshot {
		p.out.data(Update{Kind: UpdateRefreshValue, Epoch: p.epoch, Endpoint: s.ep, Handle: v.handle, Value: v.dv, Received: now})
		s.fence[v.handle] = v.dv
		if ev.status[v.handle] != ua.StatusOK {
			failed = append(failed, v)
		}
	}
	p.out.data(Update{Kind: UpdateRefreshEnd, Epoch: p.epoch, Endpoint: s.ep, Cause: cause, Items: len(ev.snapshot), Received: now})

	old := p.serving
	s.activating, s.activateOnUp = false, false
	s.serving = true
	p.activating = nil
	p.serving = s
	buffered := s.buffered
	s.buffered = nil
	p.deliver(s, buffered)
	if old != nil && old != s {
		old.serving = false
		old.fence = nil
	}
	p.pushDesires() // releases the old active's items

	took := now.Sub(p.switchAt)
	p.emit(Event{Kind: EventSessionUp, At: now, Endpoint: s.ep, Role: RoleActive, Level: s.level, Cause: cause, Duration: took,
		Message: fmt.Sprintf("%s carries the data (%s): %d items, snapshot %d, %v after the %s decision",
			s.ep, levelText(s.level, s.levelProblem), len(ev.snapshot), p.epoch, took.Round(time.Microsecond), cause)})
	for _, v := range failed {
		code := ev.status[v.handle]
		p.emit(Event{Kind: EventItemFailed, At: now, Endpoint: s.ep, Role: RoleActive, Handle: v.handle, Err: code,
			Message: fmt.Sprintf("item %d (%s) rejected by %s: %v", v.handle, p.nodeOf(v.handle), s.ep, code)})
	}
	// Start returns once the first snapshot, and what the first samples
	// made of it, have reached the handlers.
	defer p.out.after(func() { p.readyOnce.Do(func() { close(p.ready) }) })

	p.feed(p.pol.SessionUp(now))
	if s.dead || p.serving != s {
		return
	}
	if s.sampled {
		p.feed(p.pol.ActiveLevel(now, s.level))
	}
	if o := p.sess[s.ep.Other()]; o != nil && o.state == SessionUp && o.sampled && !o.dead {
		p.feed(p.pol.StandbyLevel(now, o.level))
	}
}

func (p *Pair) nodeOf(h uint32) string {
	if it := p.items[h]; it != nil {
		return it.nodeStr
	}
	return "?"
}

// deliver hands data notifications of the serving session to the output,
// dropping those that repeat or predate the snapshot.
func (p *Pair) deliver(s *session, notes []dataNote) {
	for _, n := range notes {
		if p.items[n.handle] == nil {
			continue // removed meanwhile
		}
		if f, ok := s.fence[n.handle]; ok {
			if stale(n.dv, f) {
				continue
			}
			delete(s.fence, n.handle)
		}
		p.out.data(Update{Kind: UpdateData, Epoch: p.epoch, Endpoint: s.ep, Handle: n.handle, Value: n.dv, Received: n.at})
	}
}

func (p *Pair) onAddItems(ev evAddItems) {
	w := ev.w
	w.results, w.specs = p.register(p.items, ev.items)
	for i := range w.results {
		if w.results[i].Err == nil {
			w.add = append(w.add, i)
		}
	}
	target := p.activating
	if target == nil {
		target = p.serving
	}
	if len(w.add) == 0 || target == nil {
		if len(w.add) > 0 {
			p.pushDesires()
		}
		p.publishStatus()
		w.reply <- w.results
		return
	}
	p.pushDesires()
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

func (p *Pair) onRemoveItems(ev evRemoveItems) {
	w := ev.w
	w.errs = unregister(p.items, ev.handles)
	target := p.activating
	if target == nil {
		target = p.serving
	}
	p.pushDesires()
	if target == nil {
		p.publishStatus()
		w.done <- errors.Join(w.errs...)
		return
	}
	w.s, w.version = target, target.wantVer
	p.waiters = append(p.waiters, w)
}

// answerWaiters completes the calls that waited for s to reach a desire.
func (p *Pair) answerWaiters(s *session, ev evReconciled) {
	keep := p.waiters[:0]
	dropped := false
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s || ev.version < w.version {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
		if w.done != nil {
			continue
		}
		for j, i := range w.add {
			r, spec := &w.results[i], w.specs[j]
			code, ok := ev.status[r.Handle]
			switch {
			case !ok:
				// Removed again before it was created.
			case code == ua.StatusOK:
				r.Status = ua.StatusOK
			default:
				r.Status = code
				r.Err = fmt.Errorf("item %d (%s): rejected by %s: %w", r.Handle, spec.nodeStr, s.ep, code)
				if p.items[r.Handle] == spec {
					delete(p.items, r.Handle)
					dropped = true
				}
			}
		}
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	if dropped {
		p.pushDesires()
	}
	p.replyAll(done)
}

// replyAll answers finished calls, after publishing the status, so that
// Status agrees with what a call that returned has done.
func (p *Pair) replyAll(done []*waiter) {
	if len(done) == 0 {
		return
	}
	p.publishStatus()
	for _, w := range done {
		if w.done != nil {
			w.done <- errors.Join(w.errs...)
		} else {
			w.reply <- w.results
		}
	}
}

// releaseWaiters answers the calls that waited for s, which is gone: the
// items stay added and are created with the next session.
func (p *Pair) releaseWaiters(s *session) {
	keep := p.waiters[:0]
	var done []*waiter
	for _, w := range p.waiters {
		if w.s != s {
			keep = append(keep, w)
			continue
		}
		done = append(done, w)
	}
	clear(p.waiters[len(keep):])
	p.waiters = keep
	p.replyAll(done)
}

func (p *Pair) onWrite(ev evWrite) {
	refuse := func(l Level, cause error, reason string) {
		ev.reply <- writeGrant{err: &WriteRefusedError{Endpoint: p.pol.Active(), Level: l, Err: cause, Reason: reason}}
	}
	s := p.serving
	switch {
	case s == nil || s.dead:
		refuse(Unknown(), ErrNoSession, "no endpoint carries the data")
		return
	case p.activating != nil || s.ep != p.pol.Active():
		refuse(s.level, ErrNoSession, fmt.Sprintf("a switch to %s is in progress", p.pol.Active()))
		return
	case !s.level.Healthy():
		refuse(s.level, ErrNotHealthy, fmt.Sprintf("%s reports %s: only a Healthy server (200 or more) takes writes", s.ep, levelText(s.level, s.levelProblem)))
		return
	}
	var node *ua.NodeID
	if ev.t.byNode {
		n, err := parseNodeID(strings.TrimSpace(ev.t.node))
		if err != nil || strings.TrimSpace(ev.t.node) == "" {
			ev.reply <- writeGrant{err: fmt.Errorf("servicelevel: write: node ID %q: %v", ev.t.node, err)}
			return
		}
		node = n
	} else {
		it := p.items[ev.t.handle]
		if it == nil {
			ev.reply <- writeGrant{err: fmt.Errorf("servicelevel: write: item %d: %w", ev.t.handle, ErrUnknownHandle)}
			return
		}
		node = it.node
	}
	if !s.acquire() {
		refuse(s.level, ErrNoSession, "the active session is closing")
		return
	}
	ev.reply <- writeGrant{s: s, node: node}
}

// ---- output, status, shutdown ----

// observe turns a Policy observation into an event.
func (p *Pair) observe(o Observation) {
	e := Event{At: o.At, Endpoint: o.Endpoint, Level: o.Level, FromBand: o.From, ToBand: o.To, Cause: o.Cause,
		Probe: o.Probe, Attempt: o.Attempt, Fast: o.Fast, Until: o.Until, Message: o.String()}
	switch o.Kind {
	case ActiveBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleActive
	case StandbyBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleStandby
	case StreakStarted:
		e.Kind = EventStreakStarted
	case StreakCleared:
		e.Kind = EventStreakCleared
	case ProbeAsked:
		e.Kind, e.Role = EventProbe, RoleStandby
	case ProbeAnswered:
		e.Kind, e.Role = EventProbeAnswered, RoleStandby
	case TriggerDeferred:
		e.Kind = EventTriggerDeferred
	case RetryScheduled:
		e.Kind = EventRetryScheduled
	default:
		return
	}
	p.emit(e)
}

// emit logs e and hands it to the event handler.
func (p *Pair) emit(e Event) {
	e.URL = p.set.Endpoints[e.Endpoint]
	var le *zerolog.Event
	switch e.Kind {
	case EventConnectFailed, EventSessionLost, EventLevelUnreadable, EventItemFailed:
		le = p.log.Warn()
	case EventProbe, EventProbeAnswered, EventRetryScheduled, EventConnecting:
		le = p.log.Debug()
	default:
		le = p.log.Info()
	}
	if le.Enabled() {
		le = le.Str("event", e.Kind.String()).Str("endpoint", e.Endpoint.String()).Str("url", e.URL)
		if e.Kind == EventFailover {
			le = le.Str("to", e.Target.String()).Str("cause", e.Cause.String()).
				Str("service_level", e.Level.String()).Str("peer_service_level", e.PeerLevel.String())
		}
		if e.Err != nil {
			le = le.Err(e.Err)
		}
		le.Msg(e.Message)
	}
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
		Active:    ps.Active,
		ActiveURL: p.set.Endpoints[ps.Active],
		Connected: ps.Connected && p.serving != nil && p.serving.ep == ps.Active && p.activating == nil,
		Switching: p.activating != nil || p.sess[ps.Active] != nil && p.sess[ps.Active].state == SessionConnecting,
		Items:     len(p.items),
		Failovers: p.failovers,
		Policy:    ps,
	}
	if s := p.sess[ps.Active]; s != nil && s.sampled {
		st.ActiveLevel = s.level
	}
	st.ActiveBand = st.ActiveLevel.Band()
	if s := p.sess[ps.Active.Other()]; s != nil && s.sampled {
		st.StandbyLevel = s.level
	}
	for i, s := range p.sess {
		if s != nil {
			st.Sessions[i] = s.state
		}
	}
	p.statusMu.Lock()
	p.status = st
	p.statusMu.Unlock()
}

// shutdown ends every session; Close waits for their goroutines.
func (p *Pair) shutdown() {
	for i, s := range p.sess {
		if s == nil {
			continue
		}
		s.dead = true
		s.polite.Store(s.state == SessionUp)
		s.cancel()
		p.sess[i] = nil
	}
	p.serving, p.activating = nil, nil
	p.publishStatus()
}

func levelText(l Level, why string) string {
	if !l.Known() {
		if why != "" {
			return "ServiceLevel unknown: " + why
		}
		return "ServiceLevel unknown"
	}
	return fmt.Sprintf("ServiceLevel %s, %s", l, l.Band())
}

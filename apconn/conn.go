package apconn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/ldm"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
)

// Conn is an ApConnection: a warm active and a warm passive nats.Conn on
// different brokers that behave as one connection. Create it with Connect.
// It is safe for concurrent use.
type Conn struct {
	opts  options
	log   zerolog.Logger
	id    string
	seeds []string

	ctx    context.Context // lifetime; cancelled by Close
	cancel context.CancelFunc
	exec   *ldm.Executor
	disp   *dispatcher
	pub    publisher
	stats  counters
	steer  atomic.Pointer[steerView]
	wg     sync.WaitGroup // keeper and retire goroutines

	probeMu sync.Mutex
	probes  map[string]chan struct{}

	mu          sync.Mutex
	active      *member
	passive     *member
	members     map[uint64]*member // every open member, retiring ones included
	subs        map[uint64]*Subscription
	nextGen     uint64
	nextSub     uint64
	lame        map[string]time.Time // server ID -> when it announced LDM
	armFails    int
	armRetryAt  time.Time
	armTimer    *time.Timer
	degraded    bool
	closed      bool
	closedCh    chan struct{}
	retiring    chan struct{} // closed when the last old active is drained
	pendingWhy  Cause         // why the passive is being replaced, for its event
	passiveLost time.Time     // when the passive was lost, for re-home timing
}

// Status is the health of a Conn as a whole.
type Status int

const (
	// StatusConnected: an active and a ready passive.
	StatusConnected Status = iota + 1
	// StatusDegraded: an active but no ready passive; the Conn keeps trying
	// to arm one.
	StatusDegraded
	// StatusReconnecting: no usable active; publishes are held.
	StatusReconnecting
	// StatusClosed: Close was called.
	StatusClosed
)

func (s Status) String() string {
	switch s {
	case StatusConnected:
		return "connected"
	case StatusDegraded:
		return "degraded"
	case StatusReconnecting:
		return "reconnecting"
	case StatusClosed:
		return "closed"
	}
	return "unknown"
}

// Connect connects the active to one of servers and arms a passive on
// another, proven to forward end to end. servers may also be
// comma-separated lists, as for nats.Connect. Servers the cluster
// advertises are used too.
//
// Connect retries the active until ctx is done. If no second broker can be
// had, it returns a Conn with an active only, in StatusDegraded, which keeps
// trying to arm a passive and reports EventDegraded.
func Connect(ctx context.Context, servers []string, opts ...Option) (*Conn, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	seeds, err := validateURLs(servers)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		opts:     o,
		log:      o.logger.With().Str("component", "apconn").Str("conn", o.name).Logger(),
		id:       nuid.Next(),
		seeds:    seeds,
		ctx:      lctx,
		cancel:   cancel,
		exec:     ldm.NewExecutor(),
		disp:     newDispatcher(o.onEvent),
		probes:   make(map[string]chan struct{}),
		members:  make(map[uint64]*member),
		subs:     make(map[uint64]*Subscription),
		lame:     make(map[string]time.Time),
		closedCh: make(chan struct{}),
	}
	c.pub.ledger.max = o.replayBytes
	c.pub.released = make(chan struct{})

	a, err := c.connectActive(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.mu.Lock()
	a.role = RoleActive
	a.proven = true
	c.active = a
	c.members[a.gen] = a
	c.updateSteerLocked()
	c.mu.Unlock()
	c.pub.release(a, false)
	c.log.Info().Str("server", a.server().Name).Str("url", a.server().URL).Msg("active connected")

	c.wg.Add(1)
	go c.keep()

	// Arm the passive before returning, so that a caller normally starts
	// with a full pair; a failure leaves the Conn degraded, not broken.
	done := make(chan struct{})
	if c.exec.Submit(reconcileKey, func(ectx context.Context) { c.reconcile(ectx); close(done) }) {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return c, nil
}

func (c *Conn) connectActive(ctx context.Context) (*member, error) {
	backoff := c.opts.armBackoffMin
	for attempt := 1; ; attempt++ {
		m, err := c.dial(c.seeds)
		if err == nil {
			return m, nil
		}
		// Each attempt is logged with its reason: an operator whose relay
		// does not start must see why without a debug level.
		if isAuthError(err) {
			c.log.Error().Err(err).Int("attempt", attempt).Strs("urls", redactURLs(c.seeds)).Msg("NATS refused the credentials")
			if c.opts.failOnAuth {
				return nil, fmt.Errorf("%w: %v", ErrAuthorization, err)
			}
		} else {
			c.log.Warn().Err(err).Int("attempt", attempt).Strs("urls", redactURLs(c.seeds)).
				Int64("retry_in_ms", backoff.Milliseconds()).Msg("NATS connect failed; retrying")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v (last error: %v)", ErrNoServers, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.opts.armBackoffMax)
	}
}

// reconcileKey is the executor key of the reconcile task: every trigger
// asks for the same thing, to bring the pair back to a healthy shape, so a
// burst of triggers runs it once.
const reconcileKey = "reconcile"

func (c *Conn) requestReconcile() {
	c.exec.Submit(reconcileKey, c.reconcile)
}

// onLameDuck runs on nats.go's callback goroutine: it records the notice
// and hands the work to the executor.
func (c *Conn) onLameDuck(m *member) {
	now := time.Now()
	c.stats.lameDuck.Add(1)
	c.mu.Lock()
	if m.retired || c.closed {
		c.mu.Unlock()
		return
	}
	m.ldm, m.ldmAt = true, now
	if m.server().ID != "" {
		c.lame[m.server().ID] = now
	}
	role, srv := m.role, m.server()
	c.updateSteerLocked()
	c.mu.Unlock()
	c.log.Info().Str("role", role.String()).Str("server", srv.Name).Str("url", srv.URL).Msg("broker announced lame-duck mode")
	c.disp.emit(Event{Kind: EventLameDuck, Role: role, From: srv, At: now, Triggered: now})
	c.requestReconcile()
}

func (c *Conn) onDisconnect(m *member, err error) {
	now := time.Now()
	c.mu.Lock()
	if m.retired || c.closed {
		c.mu.Unlock()
		return
	}
	c.markDownLocked(m, now, CauseActiveDown)
	c.mu.Unlock()
	c.log.Debug().Err(err).Str("server", m.server().Name).Msg("connection lost")
	c.requestReconcile()
}

// markDownLocked records that m's link is gone and, for the active, holds
// publishes so that nothing more is handed to a dead socket.
func (c *Conn) markDownLocked(m *member, at time.Time, why Cause) {
	if m.down {
		return
	}
	m.down, m.downAt, m.downWhy = true, at, why
	close(m.lost)
	if m == c.active {
		c.pub.hold()
		if !c.passive.ready() {
			c.log.Warn().Str("server", m.server().Name).Str("cause", why.String()).Msg("active lost with no passive ready: holding publishes while reconnecting")
			c.disp.emit(Event{Kind: EventActiveDown, Cause: why, Role: RoleActive, From: m.server(), At: at, Triggered: at})
		}
	}
	if m == c.passive && c.passiveLost.IsZero() {
		c.passiveLost = at
	}
	c.updateSteerLocked()
}

func (c *Conn) onReconnect(m *member, nc *nats.Conn) {
	srv := serverOf(nc)
	m.attempts.Store(0)
	c.mu.Lock()
	if m.retired || c.closed {
		c.mu.Unlock()
		return
	}
	m.down, m.forced, m.ldm = false, false, false
	m.lost = make(chan struct{})
	m.setServer(srv)
	c.updateSteerLocked()
	c.mu.Unlock()
	c.requestReconcile()
}

func (c *Conn) onAsyncError(m *member, err error) {
	if errors.Is(err, nats.ErrSlowConsumer) {
		c.stats.slowConsumer.Add(1)
	}
	c.log.Warn().Err(err).Str("server", m.server().Name).Msg("async error")
}

// updateSteerLocked publishes what nats.go's reconnect steering may read.
func (c *Conn) updateSteerLocked() {
	v := &steerView{closed: c.closed, avoid: make(map[string]bool)}
	if c.active != nil {
		v.activeGen = c.active.gen
	}
	v.passiveReady = c.passive.ready()
	if c.passive != nil {
		v.avoid[hostPort(c.passive.server().URL)] = true
	}
	for _, m := range c.members {
		if m.ldm {
			v.avoid[hostPort(m.server().URL)] = true
		}
	}
	c.steer.Store(v)
}

// keep runs the publish confirmations and the liveness checks.
func (c *Conn) keep() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.confirmInterval)
	defer t.Stop()
	var lastActive, lastPassive time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		a, p := c.active, c.passive
		if a != nil && (a.down || a.retired) {
			a = nil
		}
		if p != nil && (p.down || p.retired) {
			p = nil
		}
		c.mu.Unlock()
		now := time.Now()
		c.pub.observe(now)
		if a != nil && (c.pub.pending() > 0 || now.Sub(lastActive) >= c.opts.livenessInterval) {
			err := c.confirm(c.ctx, a)
			switch {
			case err == nil:
				lastActive = now
			case isTimeout(err) && c.ctx.Err() == nil:
				c.linkTimeout(a)
			}
		}
		if p != nil && now.Sub(lastPassive) >= c.opts.livenessInterval {
			err := c.flushMember(c.ctx, p)
			switch {
			case err == nil:
				lastPassive = now
			case isTimeout(err) && c.ctx.Err() == nil:
				c.linkTimeout(p)
			}
		}
	}
}

// linkTimeout handles a member whose broker stopped answering PINGs: as far
// as the Conn is concerned the link is dead, whatever nats.go thinks.
func (c *Conn) linkTimeout(m *member) {
	c.mu.Lock()
	if m.retired || m.down || c.closed {
		c.mu.Unlock()
		return
	}
	why := CauseLinkTimeout
	if m == c.passive {
		why = CausePassiveDown
	}
	c.markDownLocked(m, time.Now(), why)
	c.mu.Unlock()
	c.log.Warn().Str("server", m.server().Name).Dur("timeout_ms", c.opts.livenessTimeout).Msg("link stopped answering")
	c.requestReconcile()
}

// Status returns the health of the Conn.
func (c *Conn) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return StatusClosed
	case c.active == nil || c.active.down:
		return StatusReconnecting
	case !c.passive.ready():
		return StatusDegraded
	}
	return StatusConnected
}

// ActiveServer returns the broker of the active connection; ok is false if
// there is none up.
func (c *Conn) ActiveServer() (s Server, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active == nil || c.active.down {
		return Server{}, false
	}
	return c.active.server(), true
}

// PassiveServer returns the broker of the passive connection; ok is false if
// no passive is ready.
func (c *Conn) PassiveServer() (s Server, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.passive.ready() {
		return Server{}, false
	}
	return c.passive.server(), true
}

// Active returns the nats.Conn that currently carries publishes and
// subscriptions, for calls this package does not wrap (JetStream, micro
// services). It changes at a switch: watch EventSwitched and do not keep
// subscriptions made on it directly.
func (c *Conn) Active() *nats.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active == nil {
		return nil
	}
	return c.active.nc
}

// Flush waits until every publish made before the call has been confirmed
// by the broker that carries it, across a switch if one happens meanwhile.
func (c *Conn) Flush(ctx context.Context) error {
	for {
		c.pub.mu.Lock()
		if c.pub.closed {
			c.pub.mu.Unlock()
			return ErrClosed
		}
		t, released := c.pub.target, c.pub.released
		c.pub.mu.Unlock()
		if t == nil {
			select {
			case <-released:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := c.confirm(ctx, t)
		if err == nil {
			c.pub.mu.Lock()
			same := c.pub.target == t
			c.pub.mu.Unlock()
			if same {
				return nil
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The target broke: wait for the switch and flush the new one.
		select {
		case <-released:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.opts.confirmInterval):
		}
	}
}

// Request sends a request on the active broker and waits for the reply. A
// request in flight when the active dies fails with nats.go's error; one
// made while a switch is cutting over waits for it.
func (c *Conn) Request(ctx context.Context, subj string, data []byte) (*nats.Msg, error) {
	return c.RequestMsg(ctx, &nats.Msg{Subject: subj, Data: data})
}

// RequestMsg is Request with headers.
func (c *Conn) RequestMsg(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	for {
		c.pub.mu.Lock()
		if c.pub.closed {
			c.pub.mu.Unlock()
			return nil, ErrClosed
		}
		t, released := c.pub.target, c.pub.released
		c.pub.mu.Unlock()
		if t != nil {
			return t.nc.RequestMsgWithContext(ctx, m)
		}
		select {
		case <-released:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Drain drains every subscription (messages already received are
// delivered), flushes the publishes and closes the Conn. It returns when
// that is done or ctx is, and closes the Conn either way.
func (c *Conn) Drain(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Drain(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		errs = append(errs, err)
	}
	c.Close()
	return errors.Join(errs...)
}

// Close closes both connections, stops every goroutine of the Conn and
// waits for them. Publishes not yet confirmed are not sent again. It is
// safe to call more than once, and during a switch. Do not call it from an
// event handler: it waits for the handler's goroutine.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.closedCh
		return
	}
	c.closed = true
	if c.armTimer != nil {
		c.armTimer.Stop()
	}
	c.updateSteerLocked()
	c.mu.Unlock()

	c.cancel()
	c.exec.Close()
	c.pub.mu.Lock()
	c.pub.closed = true
	c.pub.target = nil
	c.pub.mu.Unlock()

	c.mu.Lock()
	members := make([]*member, 0, len(c.members))
	for _, m := range c.members {
		m.retired = true
		members = append(members, m)
	}
	c.members = map[uint64]*member{}
	c.mu.Unlock()
	for _, m := range members {
		m.nc.Close()
	}
	c.wg.Wait()
	c.disp.emit(Event{Kind: EventClosed, At: time.Now()})
	c.disp.close()
	c.log.Info().Msg("closed")
	close(c.closedCh)
}

// OnEvent adds h to the handlers of the Conn's events, after any given with
// WithEventHandler, and returns a function that removes it. Handlers run in
// the order they were added, on the Conn's event goroutine.
func (c *Conn) OnEvent(h func(Event)) (remove func()) {
	return c.disp.add(h)
}

// Stats is a snapshot of a Conn's counters.
type Stats struct {
	Switches             uint64            // promotions of the passive, all causes
	SwitchesByCause      map[string]uint64 // by Cause.String()
	PassivesArmed        uint64
	PassiveArmFailures   uint64
	LameDuckNotices      uint64
	Published            uint64 // publishes accepted
	Replayed             uint64 // publishes sent again after a broker was lost
	PublishRejected      uint64 // ErrPublishBufferFull returns
	ReplayOverflow       uint64 // confirmed-pending publishes dropped for space
	DuplicatesSuppressed uint64 // copies dropped during a subscription overlap
	// UnorderedCutovers counts ordered switches that went ahead without
	// proof that the old broker had passed on every earlier publish (it
	// did not answer within the prove timeout): a subscriber may have
	// seen old messages after new ones.
	UnorderedCutovers uint64
	SlowConsumers     uint64
	Pending           int // publishes not yet confirmed or still held
}

type counters struct {
	switches        atomic.Uint64
	armed           atomic.Uint64
	armFailures     atomic.Uint64
	lameDuck        atomic.Uint64
	published       atomic.Uint64
	replayed        atomic.Uint64
	publishRejected atomic.Uint64
	suppressed      atomic.Uint64
	unordered       atomic.Uint64
	slowConsumer    atomic.Uint64
	byCauseMu       sync.Mutex
	byCause         map[string]uint64
}

func (c *counters) countSwitch(why Cause) {
	c.switches.Add(1)
	c.byCauseMu.Lock()
	if c.byCause == nil {
		c.byCause = make(map[string]uint64)
	}
	c.byCause[why.String()]++
	c.byCauseMu.Unlock()
}

// Stats returns a snapshot of the Conn's counters.
func (c *Conn) Stats() Stats {
	s := Stats{
		Switches:             c.stats.switches.Load(),
		PassivesArmed:        c.stats.armed.Load(),
		PassiveArmFailures:   c.stats.armFailures.Load(),
		LameDuckNotices:      c.stats.lameDuck.Load(),
		Published:            c.stats.published.Load(),
		Replayed:             c.stats.replayed.Load(),
		PublishRejected:      c.stats.publishRejected.Load(),
		DuplicatesSuppressed: c.stats.suppressed.Load(),
		UnorderedCutovers:    c.stats.unordered.Load(),
		SlowConsumers:        c.stats.slowConsumer.Load(),
		SwitchesByCause:      map[string]uint64{},
	}
	c.stats.byCauseMu.Lock()
	for k, v := range c.stats.byCause {
		s.SwitchesByCause[k] = v
	}
	c.stats.byCauseMu.Unlock()
	c.pub.mu.Lock()
	s.Pending = c.pub.ledger.len()
	s.ReplayOverflow = c.pub.ledger.overflow
	c.pub.mu.Unlock()
	return s
}

// ErrAuthorization is returned by Connect with WithFailOnAuthError when the
// servers refuse the credentials.
var ErrAuthorization = errors.New("apconn: the NATS servers refused the credentials")

// isAuthError reports whether err is the servers refusing the
// credentials, as opposed to a server out of reach.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// redactURLs returns the URLs with any password replaced, for logs.
func redactURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		if pu, err := url.Parse(u); err == nil {
			out[i] = pu.Redacted()
		} else {
			out[i] = "(unparsable URL)"
		}
	}
	return out
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrNotOwned is returned for a write to a source this relay does not own.
var ErrNotOwned = errors.New("source is owned by another relay of the fleet")

// errFenced is what the fenced sink returns for an update of a source whose
// lease this relay can no longer vouch for.
var errFenced = errors.New("fleet: lease not held (fenced)")

// SourceFactory builds a new instance of a source each time a fleet relay
// wins its lease (a source cannot be started again after Close).
type SourceFactory func() (bridge.Source, error)

// WithSourceFactory adds a source built by the caller, like WithSource, for
// a relay that may have to build it more than once: a fleet relay builds a
// new instance each time it wins the source's lease. name must be what the
// built sources' Name returns.
func WithSourceFactory(name string, tags []bridge.TagConfig, f SourceFactory) Option {
	return func(o *options) error {
		if f == nil || name == "" {
			return errors.New("WithSourceFactory: a name and a factory are required")
		}
		o.factories = append(o.factories, extraFactory{name, tags, f})
		return nil
	}
}

type extraFactory struct {
	name string
	tags []bridge.TagConfig
	f    SourceFactory
}

// fleetPart is a fleet relay's membership: its own NATS connection for the
// bucket, the member, and a leased wrapper per source.
type fleetPart struct {
	cfg    *FleetConfig
	log    zerolog.Logger
	id     string
	nc     *nats.Conn
	member atomic.Pointer[fleet.Member]
	leased map[string]*leasedSource
	fenced atomic.Uint64
	// versions follows the fleet's config versions (fleet_version.go).
	versions versionFollower
	// handoffs keeps the pairs' handoffs (fleet_handoff.go); nil
	// without fleet.handoff.
	handoffs atomic.Pointer[handoffStore]
	// building is, per pair, the lease token of the instance being
	// built: what its factory records and takes over under.
	buildMu  sync.Mutex
	building map[string]uint64
}

func newFleetPart(c *FleetConfig, log zerolog.Logger) *fleetPart {
	return &fleetPart{cfg: c, log: log, id: c.RelayID, leased: map[string]*leasedSource{}, building: map[string]uint64{}}
}

// valid reports whether the relay may publish for source now.
func (f *fleetPart) valid(source string) (uint64, bool) {
	m := f.member.Load()
	if m == nil {
		return 0, false
	}
	return m.Valid(source)
}

// lease wraps a source so that it runs only while the relay owns it.
func (f *fleetPart) lease(name string, first bridge.Source, build SourceFactory) *leasedSource {
	ls := &leasedSource{name: name, build: build, spare: first, f: f,
		log: f.log.With().Str("source", name).Logger()}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	if rb, ok := first.(bridge.ReplyBounder); ok {
		ls.replyBound = rb.SubscribeReplyBound()
	}
	f.leased[name] = ls
	return ls
}

// connect opens the fleet's own connection to the cluster: the bucket's
// renewals must not queue behind the sink's publishes.
func (f *fleetPart) connect(servers []string, name string, opts []nats.Option) error {
	nopts := append([]nats.Option{
		nats.Name(name), nats.MaxReconnects(-1),
		// Lease renewals must not stall for long: a relay whose last
		// renewal went out ¾ of the lease TTL ago fences itself, and
		// the fleet hands its sources to another relay. So the bucket
		// connection leaves a lame-duck broker at once rather than
		// riding it down to the eviction, and reconnects after a broker
		// died within about 100 ms rather than nats.go's default 2 s.
		nats.ReconnectWait(fleetReconnectWait),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			// Quick (the reconnect runs on nats.go's own goroutine),
			// so it may run on the callback goroutine.
			if err := nc.ForceReconnect(); err != nil {
				f.log.Warn().Err(err).Msg("fleet: leaving the lame-duck broker failed")
			}
		}),
	}, opts...)
	nc, err := nats.Connect(strings.Join(servers, ","), nopts...)
	if err != nil {
		return fmt.Errorf("fleet: connect: %w", err)
	}
	f.nc = nc
	return nil
}

// join joins the fleet over the connection connect opened; ownership
// events start and stop the leased sources.
func (f *fleetPart) join(ctx context.Context) error {
	pairs := make([]string, 0, len(f.leased))
	for p := range f.leased {
		pairs = append(pairs, p)
	}
	if f.cfg.HandoffEnabled() {
		// Open before the first lease is won: its instance reads the
		// previous owner's handoff.
		js, err := jetstream.New(f.nc)
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		hs, err := openHandoffStore(ctx, js, f.cfg, f.valid, f.log)
		if err != nil {
			return err
		}
		f.handoffs.Store(hs)
	}
	opts := []fleet.Option{fleet.WithLogger(f.log), fleet.WithHandler(f.onEvent)}
	if f.cfg.HandoffEnabled() {
		opts = append(opts, fleet.WithReleaseHook(f.onRelease))
	}
	m, err := fleet.Join(ctx, f.nc, f.cfg.fleetConfig(pairs), opts...)
	if err != nil {
		return err
	}
	f.member.Store(m)
	return nil
}

// onEvent runs on the member's goroutine: it must not block.
func (f *fleetPart) onEvent(e fleet.Event) {
	ls := f.leased[e.Pair]
	if ls == nil {
		return
	}
	if e.Owned {
		ls.gain(e.Token)
		return
	}
	ls.lose(e.Cause)
}

// onRelease runs, with fleet.handoff, before the member releases a pair
// it hands over (rebalance, shutdown), while the lease is valid: the
// instance closes first, leaving its data subscription on the server, and
// its handoff is written as final; only then can the next owner win the
// lease and transfer the subscription. Without this order the next owner
// would transfer it while this relay still ran it for the overlap, and
// this relay's session, seeing its subscription gone, could take it back.
func (f *fleetPart) onRelease(ctx context.Context, pair string) {
	ls, hs := f.leased[pair], f.handoffs.Load()
	if ls == nil || hs == nil || !hs.recording(pair) {
		// A source that recorded nothing to take over: the handover
		// keeps its overlap (make before break).
		return
	}
	ls.release(ctx)
	hs.finish(ctx, pair)
}

// leave hands every source over, then closes the fleet connection.
func (f *fleetPart) leave(ctx context.Context) error {
	f.versions.stop(ctx)
	var err error
	if m := f.member.Load(); m != nil {
		err = m.Close(ctx)
	}
	f.closeConn()
	return err
}

// setBuilding records the lease token of the instance of pair being built.
func (f *fleetPart) setBuilding(pair string, token uint64) {
	f.buildMu.Lock()
	f.building[pair] = token
	f.buildMu.Unlock()
}

// buildingToken is the lease token of the instance of pair being built (0
// before its lease was first won).
func (f *fleetPart) buildingToken(pair string) uint64 {
	f.buildMu.Lock()
	defer f.buildMu.Unlock()
	return f.building[pair]
}

// closeConn closes the fleet's connection, if it was opened.
func (f *fleetPart) closeConn() {
	if hs := f.handoffs.Load(); hs != nil {
		hs.close()
	}
	if f.nc != nil {
		f.nc.Close()
	}
}

// Fleet returns the relay's fleet member, or nil when the relay is not in a
// fleet.
func (r *Relay) Fleet() *fleet.Member {
	if r.fl == nil {
		return nil
	}
	return r.fl.member.Load()
}

// FleetFenced is how many updates a fleet relay dropped because it could
// not vouch for the source's lease at that moment (self-fencing); 0 when
// the relay is not in a fleet. The source delivered them and no relay
// published them.
func (r *Relay) FleetFenced() uint64 {
	if r.fl == nil {
		return 0
	}
	return r.fl.fenced.Load()
}

// leasedSource is a source of a fleet relay: the bridge sees one source for
// the relay's lifetime; behind it an instance runs while the relay owns the
// lease, and none otherwise.
type leasedSource struct {
	name string
	f    *fleetPart
	log  zerolog.Logger

	// ctx ends with Close; each gain's instance starts under a child of
	// it, which the loss ends, so that neither waits for a Start.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// build makes each gain's instance; a fleet version that changes
	// the source's tags sets it to the new config's (setBuild).
	build  SourceFactory
	h      bridge.Handler
	gen    uint64 // counts gains and losses; a handler of an older gen is dead
	endGen context.CancelFunc
	owned  bool
	// wonToken is the token of a lease won before Start.
	wonToken uint64
	inner    bridge.Source
	spare    bridge.Source // built at start, used by the first gain
	closed   bool
	// replyBound is what the instances answer as bridge.ReplyBounder (0
	// if they do not): the bridge reads it once, when the source is added.
	replyBound time.Duration
	// pastTransfers and pastFallbacks are the successor counts of the
	// instances closed (SuccessorTakeovers).
	pastTransfers, pastFallbacks uint64
	wg                           sync.WaitGroup
}

func (s *leasedSource) Name() string { return s.name }

// setBuild makes f build the instances of later gains and returns the
// factory before it.
func (s *leasedSource) setBuild(f SourceFactory) SourceFactory {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.build
	s.build = f
	return prev
}

// SubscribeReplyBound implements bridge.ReplyBounder with the instances'
// bound, so that a gateway source's subscribe is given its command timeout
// in a fleet too.
func (s *leasedSource) SubscribeReplyBound() time.Duration { return s.replyBound }

// Start records the handler; the instance starts when the lease is won,
// or now if it was won before the bridge started this source (the fleet
// joins before the bridge starts, so that a relayId in use is refused
// first).
func (s *leasedSource) Start(_ context.Context, h bridge.Handler) error {
	s.mu.Lock()
	s.h = h
	won := s.owned
	if won {
		s.launchLocked(s.wonToken)
	}
	s.mu.Unlock()
	if !won {
		h.HealthChanged(notOwned("lease not held yet"))
	}
	return nil
}

func notOwned(detail string) bridge.Health {
	return bridge.Health{State: bridge.StateNotOwned, Level: -1, Detail: detail}
}

// gain starts an instance on a goroutine of the source's own (the member's
// goroutine must not block), then has the bridge subscribe every tag on
// it.
func (s *leasedSource) gain(token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.owned {
		return
	}
	s.owned = true
	if s.h == nil {
		s.wonToken = token // Start launches it
		return
	}
	s.launchLocked(token)
}

// launchLocked starts an instance for a new generation. s.mu is held.
func (s *leasedSource) launchLocked(token uint64) {
	s.gen++
	gen := s.gen
	ctx, cancel := context.WithCancel(s.ctx)
	s.endGen = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.startInner(ctx, gen, token)
	}()
}

func (s *leasedSource) startInner(ctx context.Context, gen, token uint64) {
	s.mu.Lock()
	src := s.spare
	s.spare = nil
	s.mu.Unlock()
	if src != nil && s.f.handoffs.Load() != nil {
		// The spare was built before the lease was won: without the
		// handoff to take over, without its recorder. Never started,
		// it has no session to close, but a gateway source's clients
		// are open from New.
		src.Close()
		src = nil
	}
	var err error
	if src == nil {
		s.mu.Lock()
		build := s.build
		s.mu.Unlock()
		s.f.setBuilding(s.name, token)
		src, err = build()
	}
	if err == nil {
		err = src.Start(ctx, s.handlerFor(ctx, gen))
	}
	s.mu.Lock()
	switch {
	case s.gen != gen:
		// Lost, or closed, while it started: nobody wants it now.
		s.mu.Unlock()
		if src != nil {
			src.Close()
		}
		return
	case err != nil:
		h := s.h
		s.mu.Unlock()
		s.log.Error().Err(err).Msg("fleet: source could not start")
		h.HealthChanged(bridge.Health{State: bridge.StateDown, Level: -1, Detail: "start failed: " + err.Error()})
		return
	}
	s.inner = src
	h := s.h
	s.mu.Unlock()
	s.log.Info().Uint64("token", token).Msg("fleet: source owned, started")
	h.HealthChanged(src.Health())
	h.Restored()
}

// lose stops publishing at once (the gate closes with the generation) and
// closes the instance in the background.
func (s *leasedSource) lose(cause fleet.Cause) {
	if done := s.stop("lease lost: " + string(cause)); done != nil {
		s.log.Info().Str("cause", string(cause)).Msg("fleet: source lost, stopping")
	}
}

// release stops the instance as lose does, before the lease is handed over
// (fleetPart.onRelease), and waits for its Close until ctx ends.
func (s *leasedSource) release(ctx context.Context) {
	done := s.stop("lease handed over")
	if done == nil {
		return
	}
	select {
	case <-done:
		s.log.Info().Msg("fleet: source closed before its lease is handed over")
	case <-ctx.Done():
		s.log.Warn().Msg("fleet: source still closing as its lease is handed over")
	}
}

// stop ends the owned instance's generation and closes it in the
// background; the channel closes when it is closed, nil when the source
// was not owned.
func (s *leasedSource) stop(detail string) <-chan struct{} {
	s.mu.Lock()
	if !s.owned {
		s.mu.Unlock()
		return nil
	}
	s.owned = false
	s.gen++
	s.endGenLocked()
	inner, h := s.inner, s.h
	s.inner = nil
	s.retireLocked(inner)
	s.mu.Unlock()
	if h != nil {
		// nil: lost before the bridge started the source (the fleet
		// joins first), which Start then reports as not owned.
		h.HealthChanged(notOwned(detail))
	}
	done := make(chan struct{})
	if inner == nil {
		close(done)
		return done
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		inner.Close()
	}()
	return done
}

var (
	_ bridge.LinkReporter      = (*leasedSource)(nil)
	_ bridge.ReplyBounder      = (*leasedSource)(nil)
	_ bridge.SuccessorReporter = (*leasedSource)(nil)
)

// SuccessorTakeovers implements bridge.SuccessorReporter: the takeovers
// of every instance the relay ran, so that a fleet's takeovers count in
// the source's status and metrics as a restarted relay's do.
func (s *leasedSource) SuccessorTakeovers() (transferred, fallbacks uint64) {
	s.mu.Lock()
	inner := s.inner
	transferred, fallbacks = s.pastTransfers, s.pastFallbacks
	s.mu.Unlock()
	if sr, ok := inner.(bridge.SuccessorReporter); ok {
		t, f := sr.SuccessorTakeovers()
		transferred, fallbacks = transferred+t, fallbacks+f
	}
	return transferred, fallbacks
}

// retireLocked keeps the counts of the instance being closed. s.mu is
// held.
func (s *leasedSource) retireLocked(inner bridge.Source) {
	if sr, ok := inner.(bridge.SuccessorReporter); ok {
		t, f := sr.SuccessorTakeovers()
		s.pastTransfers += t
		s.pastFallbacks += f
	}
}

// LinkRecoveries implements bridge.LinkReporter with the running
// instance's counts (none while the lease is not held).
func (s *leasedSource) LinkRecoveries() (recovered, republished uint64) {
	if lr, ok := s.current().(bridge.LinkReporter); ok {
		return lr.LinkRecoveries()
	}
	return 0, 0
}

func (s *leasedSource) current() bridge.Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner
}

// Subscribe is accepted while the lease is not held: every tag is
// subscribed on the instance when the lease is won (Restored).
func (s *leasedSource) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	s.mu.Lock()
	inner, owned := s.inner, s.owned
	s.mu.Unlock()
	if inner != nil {
		return inner.Subscribe(ctx, tags)
	}
	if owned {
		return nil, errors.New("source starting")
	}
	return make([]error, len(tags)), nil
}

func (s *leasedSource) Unsubscribe(ctx context.Context, tags []bridge.Tag) error {
	if inner := s.current(); inner != nil {
		return inner.Unsubscribe(ctx, tags)
	}
	return nil
}

func (s *leasedSource) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	if _, ok := s.f.valid(s.name); ok {
		if inner := s.current(); inner != nil {
			return inner.Write(ctx, tag, v)
		}
	}
	return 0, ErrNotOwned
}

func (s *leasedSource) Health() bridge.Health {
	if inner := s.current(); inner != nil {
		return inner.Health()
	}
	return notOwned("")
}

// endGenLocked ends the context of the current generation's instance.
func (s *leasedSource) endGenLocked() {
	if s.endGen != nil {
		s.endGen()
		s.endGen = nil
	}
}

// Close stops the instance, if any, and waits for it: an instance still
// starting is told to stop (its context ends) and closed when its Start
// returns.
func (s *leasedSource) Close() error {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	s.owned = false
	s.gen++
	s.endGenLocked()
	inner, spare := s.inner, s.spare
	s.inner, s.spare = nil, nil
	s.retireLocked(inner)
	s.mu.Unlock()
	var err error
	if inner != nil {
		err = inner.Close()
	}
	s.wg.Wait()
	_ = spare // never started: nothing to close
	return err
}

// gatedHandler passes an instance's reports to the bridge while its
// generation is current and the lease valid: an instance being closed, or
// one whose relay can no longer renew, publishes nothing.
type gatedHandler struct {
	s   *leasedSource
	gen uint64
}

func (g *gatedHandler) live() (bridge.Handler, bool) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	return g.s.h, g.s.gen == g.gen
}

func (g *gatedHandler) Update(handle uint32, u wire.Update) {
	h, ok := g.live()
	if !ok {
		return
	}
	if _, valid := g.s.f.valid(g.s.name); !valid {
		g.s.f.fenced.Add(1)
		return
	}
	h.Update(handle, u)
}

func (g *gatedHandler) RefreshStart(reason string) {
	if h, ok := g.live(); ok {
		h.RefreshStart(reason)
	}
}

func (g *gatedHandler) RefreshEnd() {
	if h, ok := g.live(); ok {
		h.RefreshEnd()
	}
}

func (g *gatedHandler) HealthChanged(hl bridge.Health) {
	if h, ok := g.live(); ok {
		h.HealthChanged(hl)
	}
}

func (g *gatedHandler) Restored() {
	if h, ok := g.live(); ok {
		h.Restored()
	}
}

// fleetReconnectWait is the bucket connection's wait between reconnect
// attempts: well under the lease's fence margin.
const fleetReconnectWait = 100 * time.Millisecond

// fleetLeaveTimeout bounds the handover at shutdown.
const fleetLeaveTimeout = 5 * time.Second

// FleetStatus connects to c's cluster as c would and reads its fleet's
// bucket: which relay owns which source, how long ago each lease was
// renewed, and the placement order (the second relay is the standby that
// takes over). It is `apbridge fleet status`.
func FleetStatus(ctx context.Context, c *Config) (fleet.Status, error) {
	if c.Fleet == nil {
		return fleet.Status{}, errors.New("fleet status: the config has no fleet section")
	}
	opts, err := c.natsOptions()
	if err != nil {
		return fleet.Status{}, err
	}
	nc, err := nats.Connect(strings.Join(c.NATS.Servers, ","), append(opts, nats.Name(c.connName()+"-status"))...)
	if err != nil {
		return fleet.Status{}, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	names := make([]string, 0, len(c.Sources))
	for _, s := range c.Sources {
		names = append(names, s.Name)
	}
	return fleet.ReadStatus(ctx, nc, c.Fleet.Bucket, names)
}

package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
)

// Config is the bridge's own configuration; sources and tags are added
// with AddSource.
type Config struct {
	// Instance names this bridge in status and the micro service.
	// Default wire.DefaultInstance.
	Instance string
	// Prefix starts the subjects of the bridge's services
	// (wire.ServiceSubjects). Two bridges with the same prefix are
	// replicas of each other (they answer in a queue group); bridges that
	// serve different tags need different prefixes. Default
	// wire.DefaultPrefix.
	Prefix string
	// Subject is the template of tag subjects (see wire.Mapper). Default
	// wire.DefaultSubject.
	Subject string
	// ServiceName is the micro service's name (letters, digits, - and _),
	// which `nats micro ls` lists. Default wire.DefaultServiceName; relays
	// with different prefixes are told apart by different names.
	ServiceName string
	// Version is the micro service's version, a semantic version.
	// Default Version.
	Version string
	// Metadata is added to the micro service's metadata (what `nats
	// micro info` shows), such as the binary's VCS revision and build
	// date. The bridge's own keys, instance and prefix, win over keys of
	// the same name here.
	Metadata map[string]string
	// NoHeaders leaves the NATS headers out of every update message. By
	// default each message carries the update's quality, status code,
	// source and server timestamps and sequence number in headers too
	// (docs/payload.md lists them), so a consumer can filter without
	// decoding the JSON body.
	NoHeaders bool
	// Guard sets the subscribe-storm guard of every source.
	Guard GuardConfig
	// WriteTimeout bounds a write-back at the source. Default 5 s.
	WriteTimeout time.Duration
	// SnapshotPage is the most updates one snapshot reply carries.
	// Default 500 (about 100 KiB).
	SnapshotPage int
	// TrustRequestInfo declares that write requests can reach the bridge
	// only through a NATS service import: no client of the bridge's own
	// account may publish to <prefix>.write.> (a subject permission). The
	// NATS server then writes the Nats-Request-Info header of every write
	// request, and the write log names its account and user as the user.
	// Without it the header is a claim any client of the account can
	// make, logged as claimed_user with identity "unverified"
	// (docs/security.md). The bridge cannot check this itself: a request
	// looks the same either way.
	TrustRequestInfo bool
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = wire.DefaultPrefix
	}
	if c.Subject == "" {
		c.Subject = wire.DefaultSubject
	}
	if c.Guard == (GuardConfig{}) {
		c.Guard = DefaultGuardConfig()
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if c.SnapshotPage == 0 {
		c.SnapshotPage = 500
	}
	if c.Instance == "" {
		c.Instance = wire.DefaultInstance
	}
	if c.ServiceName == "" {
		c.ServiceName = wire.DefaultServiceName
	}
	if c.Version == "" {
		c.Version = Version
	}
}

// Option configures a Bridge. An option that cannot apply returns an
// error, which New returns.
type Option func(*options) error

type options struct {
	sink      Sink
	log       zerolog.Logger
	onSwitch  func(source, cause string, took time.Duration)
	endpoints []Endpoint
}

// Endpoint is an endpoint of the bridge's micro service added by its
// user (WithEndpoints): the relay's config service.
type Endpoint struct {
	// Name is the endpoint's name in the micro service.
	Name string
	// Subject is where it listens: under the bridge's prefix, among
	// wire.ServiceSubjects, so that no tag can be published there.
	Subject string
	// Handler answers a request.
	Handler micro.HandlerFunc
	// Everyone makes every bridge on the subject answer, not one of a
	// queue group: bridges that share a prefix are replicas, and a
	// request that changes them must reach each.
	Everyone bool
}

// WithEndpoints adds endpoints to the bridge's micro service, which moves
// with them at every switch of the ApConnection.
func WithEndpoints(eps ...Endpoint) Option {
	return func(o *options) error {
		for _, e := range eps {
			if e.Name == "" || e.Subject == "" || e.Handler == nil {
				return errors.New("WithEndpoints: an endpoint needs a name, a subject and a handler")
			}
		}
		o.endpoints = append(o.endpoints, eps...)
		return nil
	}
}

// WithSourceSwitchObserver calls f after each failover of a source (to
// the other server of a pair, the other gateway) with the source's name,
// the cause and how long the failover took, for metrics. f must not block.
func WithSourceSwitchObserver(f func(source, cause string, took time.Duration)) Option {
	return func(o *options) error { o.onSwitch = f; return nil }
}

// WithSink replaces the default core NATS publishing.
func WithSink(s Sink) Option {
	return func(o *options) error {
		if s == nil {
			return errors.New("WithSink: nil sink")
		}
		o.sink = s
		return nil
	}
}

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// Bridge relays the tags of its sources to NATS over an apconn.Conn.
type Bridge struct {
	// epoch is the value of every update's wire.HeaderEpoch: when the
	// bridge was made, so that each run of a relay numbers its tags' seq
	// in a sequence of its own. Read-only, shared by every message.
	epoch  []string
	conn   *apconn.Conn
	sink   Sink
	cfg    Config
	mapper *wire.Mapper
	log    zerolog.Logger
	// onSwitch is WithSourceSwitchObserver's f, or nil.
	onSwitch func(source, cause string, took time.Duration)
	// endpoints are WithEndpoints'.
	endpoints []Endpoint

	// applyMu makes changes (Apply) one at a time.
	applyMu   sync.Mutex
	mu        sync.Mutex
	sources   []*runner
	bySubject map[string]*tagState // publish subject -> tag, for write-back
	// started and closed change under mu; started is never reset.
	started bool
	closed  bool

	// healthCh is closed, and replaced, at every health change of a
	// source (WaitReady).
	healthMu sync.Mutex
	healthCh chan struct{}
	// done is closed by Close.
	done chan struct{}

	svc       *service
	stopEvent func()
	lastSw    atomic.Pointer[apconn.Event]
	startAt   time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New creates a Bridge that publishes over conn. Sources are added with
// AddSource before Start.
func New(conn *apconn.Conn, cfg Config, opts ...Option) (*Bridge, error) {
	if conn == nil {
		return nil, errors.New("bridge: nil connection")
	}
	cfg.setDefaults()
	if err := cfg.Guard.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if err := wire.ValidateSubject(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("bridge: prefix: %w", err)
	}
	if r, ok := wire.Reserved(cfg.Prefix + ".status"); ok {
		// Its events would be published there, and its services listen
		// there.
		return nil, fmt.Errorf("bridge: prefix: %q is in the reserved subject space %s", cfg.Prefix, r)
	}
	m, err := wire.NewMapper(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if err := ValidateServiceName(cfg.ServiceName); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	o := options{sink: NewCoreSink(conn), log: zerolog.Nop()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("bridge: %w", err)
		}
	}
	return &Bridge{
		epoch: []string{strconv.FormatInt(time.Now().UnixMilli(), 10)},
		conn:  conn, sink: o.sink, cfg: cfg, mapper: m, onSwitch: o.onSwitch, endpoints: o.endpoints,
		log:       o.log.With().Str("component", "bridge").Logger(),
		bySubject: map[string]*tagState{}, svc: &service{}, healthCh: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Start binds the sink, starts the bridge's NATS services (status,
// snapshot, write-back) and starts every source, each on a goroutine of its
// own, and returns: it never waits for a source's servers. A source
// connects, and retries, on its own schedule, and one that cannot reach
// its servers holds up no other; Ready and WaitReady tell when every
// source is connected. A source whose Start fails is reported down with
// the error, and the others run on. Stop the bridge with Close. ctx bounds
// the start only.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	if b.started || b.closed {
		b.mu.Unlock()
		return errors.New("bridge: already started")
	}
	b.started = true
	b.startAt = time.Now()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	sources := append([]*runner(nil), b.sources...)
	subjects := b.subjects(sources)
	b.mu.Unlock()

	fail := func(err error) error {
		for _, r := range sources {
			close(r.startDone) // never to start: Close need not wait
		}
		b.Close()
		return err
	}
	if bs, ok := b.sink.(Binder); ok {
		if err := bs.Bind(ctx, subjects); err != nil {
			return fail(err)
		}
	}
	b.stopEvent = b.conn.OnEvent(b.onConnEvent)
	if err := b.moveService(); err != nil {
		return fail(err)
	}
	for _, r := range sources {
		b.startRunner(r)
	}
	b.log.Info().Int("sources", len(sources)).Str("prefix", b.cfg.Prefix).Msg("bridge started")
	return nil
}

// startRunner runs r on a context of its own, under the bridge's, so
// that a source can be removed alone (Apply).
func (b *Bridge) startRunner(r *runner) {
	ctx, cancel := context.WithCancel(b.ctx)
	r.ctx, r.cancel = ctx, cancel
	b.wg.Add(1)
	go r.run(ctx)
}

func (b *Bridge) onConnEvent(e apconn.Event) {
	if e.Kind != apconn.EventSwitched {
		return
	}
	b.lastSw.Store(&e)
	// The micro service lives on the active nats.Conn: move it.
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if !closed {
		if err := b.moveService(); err != nil {
			b.log.Error().Err(err).Msg("service not moved to the new active connection")
		}
	}
}

// Close stops the sources first, so nothing more comes in, then waits up
// to 10 s until everything already received is confirmed by the broker,
// then stops the services. Use Shutdown to bound the wait yourself. The
// Conn is the caller's to close. Close is idempotent.
func (b *Bridge) Close() error {
	return b.Shutdown(context.Background())
}

// Shutdown is Close bounded by ctx.
func (b *Bridge) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	started := b.started
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()
	// A source blocked in a full sink must not hang the shutdown: the sink
	// is aborted when ctx ends, or after the 10 s the flush gets too.
	if a, ok := b.sink.(Aborter); ok {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		defer context.AfterFunc(actx, a.Abort)()
	}
	if b.cancel != nil {
		// Ends a source's Start that is still running, and the guards.
		b.cancel()
	}
	var (
		errMu sync.Mutex
		errs  []error
		wg    sync.WaitGroup
	)
	if started {
		// Each source stops on its own: one whose servers are gone and
		// whose Close takes its time delays none of the others.
		for _, r := range sources {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.awaitStart(ctx)
				if err := r.src.Close(); err != nil {
					errMu.Lock()
					errs = append(errs, fmt.Errorf("source %q: %w", r.src.Name(), err))
					errMu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	b.wg.Wait()
	if started {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := b.sink.Flush(fctx); err != nil {
			errs = append(errs, fmt.Errorf("flush: %w", err))
		}
		cancel()
	}
	if b.stopEvent != nil {
		b.stopEvent()
	}
	b.stopService()
	b.log.Info().Msg("bridge stopped")
	return errors.Join(errs...)
}

// publishEvent publishes a source event on <prefix>.events.<source>.
func (b *Bridge) publishEvent(source string, v map[string]any) {
	v["at"] = time.Now().UTC()
	data, err := marshalJSON(v)
	if err != nil {
		return
	}
	b.conn.Publish(wire.EventSubject(b.cfg.Prefix, source), data)
}

// Prefix returns the prefix of the bridge's service subjects.
func (b *Bridge) Prefix() string { return b.cfg.Prefix }

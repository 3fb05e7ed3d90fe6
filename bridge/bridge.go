package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/wire"
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

// TagConfig is one tag of a source.
type TagConfig struct {
	// Name is the tag's name, unique within its source.
	Name string `yaml:"name" json:"name"`
	// Address is where the source finds it (an OPC UA node ID).
	Address string `yaml:"address" json:"address"`
	// Subject overrides the subject template for this tag.
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
	// Writable allows write-back through <prefix>.write.<subject>.
	Writable bool `yaml:"writable,omitempty" json:"writable,omitempty"`
}

// Option configures a Bridge. An option that cannot apply returns an
// error, which New returns.
type Option func(*options) error

type options struct {
	sink     Sink
	log      zerolog.Logger
	now      func() time.Time
	onSwitch func(source, cause string, took time.Duration)
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

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("WithClock: nil clock")
		}
		o.now = now
		return nil
	}
}

// Bridge relays the tags of its sources to NATS over an apconn.Conn.
type Bridge struct {
	conn   *apconn.Conn
	sink   Sink
	cfg    Config
	mapper *wire.Mapper
	log    zerolog.Logger
	now    func() time.Time
	// onSwitch is WithSourceSwitchObserver's f, or nil.
	onSwitch func(source, cause string, took time.Duration)

	mu        sync.Mutex
	sources   []*runner
	bySubject map[string]*tagState // publish subject -> tag, for write-back
	started   bool
	closed    bool

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
	m, err := wire.NewMapper(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if err := ValidateServiceName(cfg.ServiceName); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	o := options{sink: NewCoreSink(conn), log: zerolog.Nop(), now: time.Now}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("bridge: %w", err)
		}
	}
	return &Bridge{
		conn: conn, sink: o.sink, cfg: cfg, mapper: m, now: o.now, onSwitch: o.onSwitch,
		log:       o.log.With().Str("component", "bridge").Logger(),
		bySubject: map[string]*tagState{}, svc: &service{},
	}, nil
}

// tagState is a tag as the bridge tracks it.
type tagState struct {
	cfg     TagConfig
	src     *runner
	handle  uint32
	subject string

	// Guarded by the runner's mu.
	seq        uint64
	last       wire.Update
	have       bool
	subscribed bool
	subErr     string
}

// AddSource adds a source and its tags. Every tag's subject is worked out
// and checked now: an error names the tag.
func (b *Bridge) AddSource(src Source, tags []TagConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("bridge: AddSource after Start")
	}
	name := src.Name()
	for _, r := range b.sources {
		if r.src.Name() == name {
			return fmt.Errorf("bridge: source %q added twice", name)
		}
	}
	r := newRunner(b, src)
	seen := map[string]bool{}
	svc := wire.NewPatterns(wire.ServiceSubjects(b.cfg.Prefix)...) // once for every tag
	for i, tc := range tags {
		if tc.Name == "" {
			return fmt.Errorf("bridge: source %q: tags[%d]: name is empty", name, i)
		}
		if seen[tc.Name] {
			return fmt.Errorf("bridge: source %q: tag %q is listed twice", name, tc.Name)
		}
		seen[tc.Name] = true
		subj := tc.Subject
		if subj == "" {
			s, err := b.mapper.Subject(name, tc.Name, tc.Address)
			if err != nil {
				return fmt.Errorf("bridge: source %q: %w", name, err)
			}
			subj = s
		} else if err := wire.ValidateSubject(subj); err != nil {
			return fmt.Errorf("bridge: source %q: tag %q: %w", name, tc.Name, err)
		}
		if sv, ok := svc.Overlapping(subj); ok {
			return fmt.Errorf("bridge: source %q: tag %q: subject %q overlaps the service subject %q (updates would arrive as requests)",
				name, tc.Name, subj, sv)
		}
		if other, dup := b.bySubject[subj]; dup {
			return fmt.Errorf("bridge: source %q: tag %q maps to subject %q, like tag %q of source %q",
				name, tc.Name, subj, other.cfg.Name, other.src.src.Name())
		}
		ts := &tagState{cfg: tc, src: r, handle: uint32(i + 1), subject: subj}
		r.tags = append(r.tags, ts)
		r.byHandle[ts.handle] = ts
		b.bySubject[subj] = ts
	}
	b.sources = append(b.sources, r)
	return nil
}

// Start starts every source, the subscribe guards and the bridge's NATS
// services (status, snapshot, write-back), and returns. Stop it with
// Close. ctx bounds the start only.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	if b.started || b.closed {
		b.mu.Unlock()
		return errors.New("bridge: already started")
	}
	b.started = true
	b.startAt = b.now()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()

	if bs, ok := b.sink.(Binder); ok {
		if err := bs.Bind(ctx, b.subjects(sources)); err != nil {
			b.Close()
			return err
		}
	}
	b.stopEvent = b.conn.OnEvent(b.onConnEvent)
	if err := b.moveService(); err != nil {
		b.Close()
		return err
	}
	for _, r := range sources {
		if err := r.src.Start(ctx, r); err != nil {
			b.Close()
			return fmt.Errorf("bridge: start source %q: %w", r.src.Name(), err)
		}
		b.wg.Add(1)
		go r.guardLoop(b.ctx)
		r.want()
	}
	b.log.Info().Int("sources", len(sources)).Str("prefix", b.cfg.Prefix).Msg("bridge started")
	return nil
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
	var errs []error
	for _, r := range sources {
		if started {
			if err := r.src.Close(); err != nil {
				errs = append(errs, fmt.Errorf("source %q: %w", r.src.Name(), err))
			}
		}
	}
	if b.cancel != nil {
		b.cancel()
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
	v["at"] = b.now().UTC()
	data, err := marshalJSON(v)
	if err != nil {
		return
	}
	b.conn.Publish(wire.EventSubject(b.cfg.Prefix, source), data)
}

// Subject returns the subject a tag of a source is published on.
func (b *Bridge) Subject(source, tag string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.sources {
		if r.src.Name() != source {
			continue
		}
		for _, ts := range r.tags {
			if ts.cfg.Name == tag {
				return ts.subject, true
			}
		}
	}
	return "", false
}

// WriteSubject returns the subject to send write requests for a tag to.
func (b *Bridge) WriteSubject(source, tag string) (string, bool) {
	s, ok := b.Subject(source, tag)
	if !ok {
		return "", false
	}
	return wire.WriteSubject(b.cfg.Prefix, s), true
}

// Prefix returns the prefix of the bridge's service subjects.
func (b *Bridge) Prefix() string { return b.cfg.Prefix }

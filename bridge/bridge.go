package bridge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Config is the bridge's own configuration; sources and tags are added
// with AddSource.
type Config struct {
	// Instance names this bridge in status and the micro service.
	Instance string
	// Prefix starts the subjects of the bridge's services:
	// <Prefix>.status, <Prefix>.snapshot, <Prefix>.write.<tag subject> and
	// <Prefix>.events.<source>. Two bridges with the same prefix are
	// replicas of each other (they answer in a queue group); bridges that
	// serve different tags need different prefixes. Default "apbridge".
	Prefix string
	// Subject is the template of tag subjects (see Mapper). Default
	// "apbridge.{source}.{tag}".
	Subject string
	// Headers puts quality, status, type, times and sequence number in
	// NATS headers too. Default true; set NoHeaders to leave them out.
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
		c.Prefix = "apbridge"
	}
	if c.Subject == "" {
		c.Subject = "apbridge.{source}.{tag}"
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
		c.Instance = "apbridge"
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

// Sink is where the bridge puts encoded updates. The default publishes on
// the ApConnection (core NATS); a JetStream sink can store them instead.
// Publish is called from one goroutine per source, in the order of that
// source's updates; it may block to apply backpressure toward the source.
// The message is the sink's from then on: the bridge does not touch it
// again.
type Sink interface {
	Publish(source string, m *nats.Msg, u *Update) error
	// Flush waits until everything published so far is stored or
	// confirmed by the broker.
	Flush(ctx context.Context) error
}

// coreSink publishes on the ApConnection: at most once, with the
// connection's ledger carrying publishes across its switches.
type coreSink struct{ conn *apconn.Conn }

func (s coreSink) Publish(_ string, m *nats.Msg, _ *Update) error { return s.conn.PublishOwned(m) }
func (s coreSink) Flush(ctx context.Context) error                { return s.conn.Flush(ctx) }

// sinkBinder is a sink that needs the bridge's subjects before it takes
// updates (the JetStream sink sets its stream up and checks that it
// captures every tag subject and none of the service subjects).
type sinkBinder interface {
	bind(ctx context.Context, prefix string, tags map[string][]string) error
}

// sinkAborter is a sink whose Publish can block (backpressure): abort makes
// blocked and later calls return at once.
type sinkAborter interface{ abort() }

// tagSubjects returns every tag subject by source name.
func (b *Bridge) tagSubjects(sources []*runner) map[string][]string {
	out := make(map[string][]string, len(sources))
	for _, r := range sources {
		for _, ts := range r.tags {
			out[r.src.Name()] = append(out[r.src.Name()], ts.subject)
		}
	}
	return out
}

// Option configures a Bridge.
type Option func(*Bridge)

// WithSink replaces the default core NATS publishing.
func WithSink(s Sink) Option { return func(b *Bridge) { b.sink = s } }

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option { return func(b *Bridge) { b.log = l } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(b *Bridge) { b.now = now } }

// Bridge relays the tags of its sources to NATS over an apconn.Conn.
type Bridge struct {
	conn   *apconn.Conn
	sink   Sink
	cfg    Config
	mapper *Mapper
	log    zerolog.Logger
	now    func() time.Time

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
	if err := ValidateSubject(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("bridge: prefix: %w", err)
	}
	m, err := NewMapper(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	b := &Bridge{
		conn: conn, sink: coreSink{conn}, cfg: cfg, mapper: m, log: zerolog.Nop(), now: time.Now,
		bySubject: map[string]*tagState{}, svc: &service{},
	}
	for _, o := range opts {
		o(b)
	}
	b.log = b.log.With().Str("component", "bridge").Logger()
	return b, nil
}

// tagState is a tag as the bridge tracks it.
type tagState struct {
	cfg     TagConfig
	src     *runner
	handle  uint32
	subject string

	// Guarded by the runner's mu.
	seq        uint64
	last       Update
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
		} else if err := ValidateSubject(subj); err != nil {
			return fmt.Errorf("bridge: source %q: tag %q: %w", name, tc.Name, err)
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

	if bs, ok := b.sink.(sinkBinder); ok {
		if err := bs.bind(ctx, b.cfg.Prefix, b.tagSubjects(sources)); err != nil {
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

// Close stops the sources first, so nothing more comes in, then waits until
// everything already received is confirmed by the broker (or ctx ends),
// then stops the services. The Conn is the caller's to close.
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
	if a, ok := b.sink.(sinkAborter); ok {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		defer context.AfterFunc(actx, a.abort)()
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

// runner drives one source: it is the source's Handler and runs its
// subscribe guard.
type runner struct {
	b        *Bridge
	src      Source
	tags     []*tagState
	byHandle map[uint32]*tagState

	mu         sync.Mutex // guards the tags' mutable fields and the fields below
	refreshing bool
	health     Health
	lastLen    int

	guardMu sync.Mutex // guards guard and cancelReq
	guard   *Guard
	events  chan guardEvent

	counters sourceCounters
}

type sourceCounters struct {
	updates, published, publishErrors, unsupported atomic.Uint64
	subscribeRequests, subscribeFailures           atomic.Uint64
	lostReplies, writes, writeErrors               atomic.Uint64
	refreshes                                      atomic.Uint64
}

type guardEventKind int

const (
	evWant guardEventKind = iota + 1
	evRestored
	evReply
)

type guardEvent struct {
	kind    guardEventKind
	id      uint64
	results map[uint32]error // per tag handle
	err     error            // the request as a whole
}

func newRunner(b *Bridge, src Source) *runner {
	r := &runner{
		b: b, src: src, byHandle: map[uint32]*tagState{},
		events: make(chan guardEvent, 16),
		health: Health{State: StateConnecting, Level: -1},
	}
	r.guard = NewGuard(b.cfg.Guard, rand.Float64)
	return r
}

// Update implements Handler: one tag changed at the source.
func (r *runner) Update(handle uint32, u Update) {
	r.counters.updates.Add(1)
	r.mu.Lock()
	ts := r.byHandle[handle]
	if ts == nil {
		r.mu.Unlock()
		return
	}
	if _, ok := TypeOf(u.Value); !ok {
		r.counters.unsupported.Add(1)
		u = Unsupported(ts.cfg.Name, u.Value, u.SourceTime, u.ServerTime)
	}
	ts.seq++
	u.Tag, u.Seq = ts.cfg.Name, ts.seq
	ts.last, ts.have = u, true
	m, err := r.encodeLocked(ts.subject, &u)
	r.mu.Unlock()
	// Outside r.mu: a sink may block here (backpressure), and status,
	// snapshot and write-back must not wait for it. The order of a tag's
	// updates is kept by the source calling Update one at a time.
	if err == nil {
		err = r.b.sink.Publish(r.src.Name(), m, &u)
	}
	if err != nil {
		r.counters.publishErrors.Add(1)
		r.b.log.Warn().Err(err).Str("source", r.src.Name()).Str("tag", u.Tag).Msg("publish failed")
		return
	}
	r.counters.published.Add(1)
}

// encodeLocked encodes u as the message for the sink; r.mu is held.
func (r *runner) encodeLocked(subject string, u *Update) (*nats.Msg, error) {
	// A fresh buffer per message: the sink keeps the message until the
	// broker confirms it. Sized from the last one, it rarely grows.
	data, err := AppendJSON(make([]byte, 0, r.lastLen+32), u)
	if err != nil {
		return nil, err
	}
	r.lastLen = len(data)
	m := &nats.Msg{Subject: subject, Data: data}
	if !r.b.cfg.NoHeaders {
		m.Header = make(nats.Header, 6)
		SetHeaders(m.Header, u)
		if r.refreshing {
			m.Header[HeaderRefresh] = []string{"true"}
		}
	}
	return m, nil
}

// RefreshStart implements Handler.
func (r *runner) RefreshStart(reason string) {
	r.counters.refreshes.Add(1)
	r.mu.Lock()
	r.refreshing = true
	r.mu.Unlock()
	r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "refresh-start", "reason": reason})
}

// RefreshEnd implements Handler.
func (r *runner) RefreshEnd() {
	r.mu.Lock()
	r.refreshing = false
	r.mu.Unlock()
	r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "refresh-end"})
}

// HealthChanged implements Handler.
func (r *runner) HealthChanged(h Health) {
	r.mu.Lock()
	prev := r.health
	r.health = h
	r.mu.Unlock()
	if prev.State != h.State || prev.Endpoint != h.Endpoint {
		r.b.log.Info().Str("source", r.src.Name()).Str("state", string(h.State)).Str("endpoint", h.Endpoint).
			Int("level", h.Level).Msg("source health")
		r.b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "health", "health": h})
	}
}

// Restored implements Handler: the source lost its subscriptions.
func (r *runner) Restored() {
	r.mu.Lock()
	for _, ts := range r.tags {
		ts.subscribed = false
	}
	r.mu.Unlock()
	r.send(guardEvent{kind: evRestored})
}

func (r *runner) want() { r.send(guardEvent{kind: evWant}) }

func (r *runner) send(e guardEvent) {
	select {
	case r.events <- e:
	case <-r.b.ctx.Done():
	}
}

// guardLoop runs the source's subscribe guard: it decides when a subscribe
// request goes, runs it on a goroutine of its own and cancels it when it is
// superseded.
func (r *runner) guardLoop(ctx context.Context) {
	defer r.b.wg.Done()
	var inflight sync.WaitGroup
	// cancelReq cancels the request in flight: when it is superseded, and
	// on the way out.
	cancelReq := func() {}
	defer func() {
		cancelReq()
		inflight.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var d GuardDecision
		select {
		case <-ctx.Done():
			return
		case e := <-r.events:
			now := r.b.now()
			r.guardMu.Lock()
			switch e.kind {
			case evWant:
				d = r.guard.Want(now)
			case evRestored:
				d = r.guard.Restored(now)
			case evReply:
				ok := r.applyReply(e)
				d = r.guard.Reply(now, e.id, ok)
			}
			r.guardMu.Unlock()
		case <-timer.C:
			r.guardMu.Lock()
			before := r.guard.Stats().LostReplies
			d = r.guard.Tick(r.b.now())
			if r.guard.Stats().LostReplies > before {
				r.counters.lostReplies.Add(1)
				r.b.log.Warn().Str("source", r.src.Name()).Dur("ceiling", r.b.cfg.Guard.InFlightCeiling).
					Msg("subscribe unanswered: presuming the reply lost, sending again")
			}
			r.guardMu.Unlock()
		}
		if d.Send {
			cancelReq() // superseded
			rctx, cancel := context.WithCancel(ctx)
			cancelReq = cancel
			inflight.Add(1)
			go func(id uint64) {
				defer inflight.Done()
				r.subscribe(rctx, id, d.Reason)
			}(d.ReqID)
		}
		r.guardMu.Lock()
		next, ok := r.guard.NextDeadline()
		r.guardMu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if ok {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Reset(time.Hour)
		}
	}
}

// subscribe sends one subscribe request for every tag not yet subscribed.
func (r *runner) subscribe(ctx context.Context, id uint64, reason string) {
	r.mu.Lock()
	var tags []Tag
	for _, ts := range r.tags {
		if !ts.subscribed {
			tags = append(tags, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle})
		}
	}
	r.mu.Unlock()
	r.counters.subscribeRequests.Add(1)
	r.b.log.Info().Str("source", r.src.Name()).Int("tags", len(tags)).Str("reason", reason).Uint64("request", id).Msg("subscribing")
	e := guardEvent{kind: evReply, id: id, results: map[uint32]error{}}
	if len(tags) > 0 {
		errs, err := r.src.Subscribe(ctx, tags)
		e.err = err
		for i, t := range tags {
			if err == nil && i < len(errs) {
				e.results[t.Handle] = errs[i]
			} else if err == nil {
				e.results[t.Handle] = errors.New("no result from the source")
			}
		}
	}
	if ctx.Err() != nil {
		return // superseded or closing: the guard has moved on
	}
	r.send(e)
}

// applyReply records per-tag results and reports whether every tag is now
// subscribed.
func (r *runner) applyReply(e guardEvent) bool {
	if e.err != nil {
		r.counters.subscribeFailures.Add(1)
		r.b.log.Warn().Err(e.err).Str("source", r.src.Name()).Msg("subscribe failed")
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	all := true
	failed := 0
	for h, err := range e.results {
		ts := r.byHandle[h]
		if ts == nil {
			continue
		}
		if err != nil {
			ts.subErr = err.Error()
			all = false
			failed++
			continue
		}
		ts.subscribed, ts.subErr = true, ""
	}
	for _, ts := range r.tags {
		if !ts.subscribed {
			all = false
		}
	}
	if failed > 0 {
		r.counters.subscribeFailures.Add(1)
		r.b.log.Warn().Str("source", r.src.Name()).Int("failed", failed).Msg("some tags could not be subscribed; will retry")
	}
	return all
}

// publishEvent publishes a source event on <prefix>.events.<source>.
func (b *Bridge) publishEvent(source string, v map[string]any) {
	v["at"] = b.now().UTC()
	data, err := marshalJSON(v)
	if err != nil {
		return
	}
	b.conn.Publish(b.cfg.Prefix+".events."+EscapeToken(source), data)
}

// SourceStats are the counters of one source.
type SourceStats struct {
	Name              string `json:"name"`
	Health            Health `json:"health"`
	Tags              int    `json:"tags"`
	Good              int    `json:"good"`
	Uncertain         int    `json:"uncertain"`
	Bad               int    `json:"bad"`
	NoValue           int    `json:"noValue"`
	Failed            int    `json:"failed"` // not subscribed: the last attempt failed for it
	Updates           uint64 `json:"updates"`
	Published         uint64 `json:"published"`
	PublishErrors     uint64 `json:"publishErrors"`
	Unsupported       uint64 `json:"unsupported"`
	SubscribeRequests uint64 `json:"subscribeRequests"`
	SubscribeFailures uint64 `json:"subscribeFailures"`
	LostReplies       uint64 `json:"lostReplies"`
	SubscribeInFlight bool   `json:"subscribeInFlight"`
	Writes            uint64 `json:"writes"`
	WriteErrors       uint64 `json:"writeErrors"`
	Refreshes         uint64 `json:"refreshes"`
}

// Stats returns the counters of every source.
func (b *Bridge) Stats() []SourceStats {
	b.mu.Lock()
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()
	out := make([]SourceStats, 0, len(sources))
	for _, r := range sources {
		s := SourceStats{Name: r.src.Name(), Tags: len(r.tags)}
		r.mu.Lock()
		s.Health = r.health
		for _, ts := range r.tags {
			switch {
			case !ts.subscribed && ts.subErr != "":
				s.Failed++
			case !ts.have:
				s.NoValue++
			default:
				switch ts.last.Status.Quality() {
				case QualityGood:
					s.Good++
				case QualityUncertain:
					s.Uncertain++
				default:
					s.Bad++
				}
			}
		}
		r.mu.Unlock()
		r.guardMu.Lock()
		s.SubscribeInFlight = r.guard.InFlight()
		r.guardMu.Unlock()
		c := &r.counters
		s.Updates, s.Published, s.PublishErrors = c.updates.Load(), c.published.Load(), c.publishErrors.Load()
		s.Unsupported = c.unsupported.Load()
		s.SubscribeRequests, s.SubscribeFailures, s.LostReplies = c.subscribeRequests.Load(), c.subscribeFailures.Load(), c.lostReplies.Load()
		s.Writes, s.WriteErrors, s.Refreshes = c.writes.Load(), c.writeErrors.Load(), c.refreshes.Load()
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
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
	return b.cfg.Prefix + ".write." + s, true
}

// Prefix returns the prefix of the bridge's service subjects.
func (b *Bridge) Prefix() string { return b.cfg.Prefix }

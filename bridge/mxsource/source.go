package mxsource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/mxgateway"
	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"github.com/apbridge/apbridge/wire"
	"github.com/rs/zerolog"
)

// Source is a bridge.Source on one MxAccess gateway or a pair of them.
type Source struct {
	name    string
	cfg     Config
	log     zerolog.Logger
	onEvent func(Event)
	members []*member

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events chan memberEvent
	wake   chan struct{} // the standby has items to prepare
	// primaryTried is closed after the primary's first open attempt.
	primaryTried chan struct{}
	primaryOnce  sync.Once

	mu        sync.Mutex // guards the fields below, the items and the members' session fields
	h         bridge.Handler
	items     map[uint32]*item
	active    int // index into members; -1 while none has a session
	health    bridge.Health
	connected bool // some session was active once
	started   bool
	closed    bool
	stats     Stats

	// emitMu serialises the calls to h, so that the handler sees one
	// ordered stream across switches; refresh is the refresh a warm
	// promotion opened.
	emitMu  sync.Mutex
	refresh *refreshState

	// ho keeps the state file for a successor; nil without one.
	ho *handoff
	// first is the member that opens first: the primary, or the gateway
	// of the predecessor's session to resume.
	first int
	// abandoned: the source stops as a killed process would, leaving
	// its sessions open and its state file as it was.
	abandoned atomic.Bool
	// fallback is the reason of a predecessor's session not resumed: the
	// next active session's first values are a refresh.
	fallback string
}

// item is one tag and its state on each gateway's current session.
type item struct {
	tag     bridge.Tag
	handle  []int32 // per member: the gateway's item handle, 0 when not added
	advised []bool
	last    []*mxgateway.DataChange // per member: the last data change seen
	sent    []uint64                // per member: the worker sequence last relayed
	// relayedD is the last change relayed, from either gateway: both
	// read the same Galaxy, so a change has the same timestamp on both.
	relayedD mxgateway.DataChange
}

// seen reports whether d is older than the last change relayed, or that
// change again.
func (it *item) seen(d mxgateway.DataChange) bool {
	r := it.relayedD
	if d.Timestamp.IsZero() || r.Timestamp.IsZero() {
		return false
	}
	return d.Timestamp.Before(r.Timestamp) || (d.Timestamp.Equal(r.Timestamp) && d.Value == r.Value)
}

// older reports whether d is older than the last change relayed.
func (it *item) older(d mxgateway.DataChange) bool {
	r := it.relayedD
	return !d.Timestamp.IsZero() && !r.Timestamp.IsZero() && d.Timestamp.Before(r.Timestamp)
}

func (it *item) relayed(d mxgateway.DataChange) {
	if !d.Timestamp.IsZero() {
		it.relayedD = d
	}
}

// Option configures a Source.
type Option func(*options) error

type options struct {
	log     zerolog.Logger
	onEvent func(Event)
	client  []mxgateway.Option
	store   HandoffStore
}

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithEventHandler calls f for every session change and switch, on the
// source's own goroutine; f must not block.
func WithEventHandler(f func(Event)) Option {
	return func(o *options) error { o.onEvent = f; return nil }
}

// WithClientOptions passes options to every gateway client (dial options,
// keepalive).
func WithClientOptions(opts ...mxgateway.Option) Option {
	return func(o *options) error { o.client = append(o.client, opts...); return nil }
}

// New checks cfg and returns a source named name on its gateways. It does
// not connect: Start does.
func New(name string, cfg Config, opts ...Option) (*Source, error) {
	if name == "" {
		return nil, errors.New("mxsource: name is empty")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mxsource: source %q: %w", name, err)
	}
	cfg = cfg.Defaults()
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("mxsource: source %q: %w", name, err)
		}
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("mxsource: source %q: %w", name, err)
	}
	copts := []mxgateway.Option{mxgateway.WithLogger(o.log)}
	if tc != nil {
		copts = append(copts, mxgateway.WithTLS(tc))
	}
	if cfg.Token != "" {
		copts = append(copts, mxgateway.WithToken(cfg.Token))
	}
	s := &Source{
		name: name, cfg: cfg, log: o.log.With().Str("source", name).Logger(), onEvent: o.onEvent,
		events: make(chan memberEvent, 16), wake: make(chan struct{}, 1), primaryTried: make(chan struct{}),
		items: map[uint32]*item{}, active: -1,
		health: bridge.Health{State: bridge.StateConnecting, Level: -1},
	}
	if o.store != nil {
		s.ho = newHandoff(o.store)
	}
	for i, ep := range cfg.Endpoints {
		c, err := mxgateway.NewClient(ep, append(copts, o.client...)...)
		if err != nil {
			s.closeClients()
			return nil, fmt.Errorf("mxsource: source %q: endpoints[%d]: %w", name, i, err)
		}
		s.members = append(s.members, &member{idx: i, target: ep, client: c})
	}
	return s, nil
}

// Name implements bridge.Source.
func (s *Source) Name() string { return s.name }

// Start implements bridge.Source: it opens a session on every gateway in
// the background and returns.
func (s *Source) Start(ctx context.Context, h bridge.Handler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return mxgateway.ErrClosed
	case s.started:
		return errors.New("mxsource: started twice")
	}
	s.started, s.h = true, h
	// The source outlives ctx, which bounds the start only: Close stops it.
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if s.ho != nil {
		s.startHandoff(h)
	}
	s.wg.Add(2 + len(s.members))
	go s.supervise()
	go s.prepareStandby()
	for _, m := range s.members {
		go s.runMember(m)
	}
	return nil
}

// Health implements bridge.Source.
func (s *Source) Health() bridge.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// SubscribeReplyBound implements bridge.ReplyBounder: a gateway answers
// every command within the session's command timeout (DEADLINE_EXCEEDED
// at worst), so the bridge's guard waits that long and a margin before it
// presumes a subscribe's reply lost.
func (s *Source) SubscribeReplyBound() time.Duration {
	return s.cfg.CommandTimeout + replyMargin
}

// replyMargin is the time beyond the command timeout a reply may take
// to arrive.
const replyMargin = 5 * time.Second

// Stats counts what the source did.
type Stats struct {
	// Switches counts promotions of the standby.
	Switches uint64
	// SessionsOpened counts sessions opened, on either gateway.
	SessionsOpened uint64
	// Resumes counts event streams resumed after a blip, with the
	// session kept.
	Resumes uint64
	// SuccessorResumes counts predecessors' sessions resumed at start
	// (WithStateFile): nothing lost.
	SuccessorResumes uint64
	// ResumeFallbacks counts predecessors' sessions that could not be
	// resumed (the gateway does not resume, or forgot the session, or no
	// longer holds the events): a new session, every tag subscribed
	// again and refreshed, the changes since the last store lost.
	ResumeFallbacks uint64
	// Commands counts subscribe commands sent (bulk or per item), on
	// either gateway, for the active or the standby.
	Commands uint64
	// LastSwitch is the last promotion, if any.
	LastSwitch Event
}

// Stats returns the counters.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

var _ bridge.SuccessorReporter = (*Source)(nil)

// SuccessorTakeovers implements bridge.SuccessorReporter: a predecessor's
// gateway session resumed at start, or given up for a new session with a
// refresh. The relay's status and metrics count them with the OPC UA
// sources' transfers.
func (s *Source) SuccessorTakeovers() (transferred, fallbacks uint64) {
	st := s.Stats()
	return st.SuccessorResumes, st.ResumeFallbacks
}

var _ bridge.LinkReporter = (*Source)(nil)

// LinkRecoveries implements bridge.LinkReporter: event streams resumed
// after a break with the session kept. The gateway replays what the stream
// missed; the source does not count those events apart, so republished is
// 0.
func (s *Source) LinkRecoveries() (recovered, republished uint64) {
	return s.Stats().Resumes, 0
}

// Close implements bridge.Source: it ends the sessions and waits for the
// source's goroutines. It is idempotent.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.health = bridge.Health{State: bridge.StateClosed, Level: -1}
	s.mu.Unlock()
	if started {
		s.cancel()
		s.wg.Wait()
	}
	s.closeClients()
	return nil
}

func (s *Source) closeClients() {
	for _, m := range s.members {
		m.client.Close()
	}
}

// Subscribe implements bridge.Source: the tags are advised on the active
// gateway (see subscribeOn for the commands) and prepared on the standby
// in the background. Tags already advised are accepted without a command.
func (s *Source) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	s.mu.Lock()
	a := s.active
	if a < 0 {
		s.mu.Unlock()
		return nil, errors.New("no gateway session")
	}
	m := s.members[a]
	sess, gen := m.sess, m.gen
	adopting := m.adopted != nil
	fallback := s.fallback
	s.fallback = ""
	var todo []*item
	var idx []int
	for i, t := range tags {
		it := s.items[t.Handle]
		if it == nil {
			n := len(s.members)
			it = &item{tag: t, handle: make([]int32, n), advised: make([]bool, n), last: make([]*mxgateway.DataChange, n), sent: make([]uint64, n)}
			s.items[t.Handle] = it
		}
		if !it.advised[a] {
			todo = append(todo, it)
			idx = append(idx, i)
		}
	}
	s.mu.Unlock()
	if fallback != "" {
		// A predecessor's session not resumed, on a relay starting:
		// these first values follow changes consumers missed.
		s.openRefresh(fallback)
	}
	if adopting {
		// A predecessor's session: what it advised costs no command.
		rest := s.adopt(m, gen, todo)
		keep := make(map[*item]bool, len(rest))
		for _, it := range rest {
			keep[it] = true
		}
		todo2, idx2 := todo[:0:0], idx[:0:0]
		for k, it := range todo {
			if keep[it] {
				todo2, idx2 = append(todo2, it), append(idx2, idx[k])
			}
		}
		todo, idx = todo2, idx2
	}
	errs := make([]error, len(tags))
	if len(todo) > 0 {
		res, err := s.subscribeOn(ctx, m, sess, gen, todo, true)
		if err != nil {
			s.endRefresh(todo)
			return nil, err
		}
		var failed []*item
		for k, e := range res {
			if e != nil {
				errs[idx[k]] = fmt.Errorf("tag %q (%s): %w", tags[idx[k]].Name, tags[idx[k]].Address, e)
				failed = append(failed, todo[k])
			}
		}
		s.endRefresh(failed)
	}
	s.wakeStandby()
	return errs, nil
}

// Unsubscribe implements bridge.Source: the tags are unadvised and removed
// on both gateways.
func (s *Source) Unsubscribe(ctx context.Context, tags []bridge.Tag) error {
	type removal struct {
		sess   *mxgateway.Session
		handle int32
		advise bool
	}
	var todo []removal
	s.mu.Lock()
	for _, t := range tags {
		it := s.items[t.Handle]
		if it == nil {
			continue
		}
		delete(s.items, t.Handle)
		for i, m := range s.members {
			if m.sess != nil && it.handle[i] != 0 {
				todo = append(todo, removal{m.sess, it.handle[i], it.advised[i]})
				delete(m.byGateway, it.handle[i])
			}
		}
	}
	s.mu.Unlock()
	// The gateway has no bulk unadvise or remove: one command each, with
	// SubscribeParallelism in flight, as the advises go (an item's
	// unadvise before its removal).
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, s.cfg.SubscribeParallelism)
	for _, r := range todo {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(append(errs, ctx.Err())...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var err error
			if r.advise {
				err = r.sess.UnAdvise(ctx, r.handle)
			}
			if err == nil {
				err = r.sess.RemoveItem(ctx, r.handle)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Write implements bridge.Source: the value goes to the active gateway as
// the configured write user; the gateway's status comes back as the
// write's status.
func (s *Source) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	s.mu.Lock()
	a := s.active
	var (
		sess   *mxgateway.Session
		handle int32
	)
	if a >= 0 {
		if it := s.items[tag.Handle]; it != nil && it.advised[a] {
			sess, handle = s.members[a].sess, it.handle[a]
		}
	}
	s.mu.Unlock()
	switch {
	case a < 0:
		return wire.StatusBadNotConnected, bridge.ErrNotWritableNow
	case sess == nil:
		return wire.StatusBadWaitingForInit, fmt.Errorf("tag %q is not subscribed on the active gateway yet", tag.Name)
	}
	err := sess.Write(ctx, handle, v)
	if err == nil {
		return wire.StatusGood, nil
	}
	var se *mxgateway.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case mxpb.MxStatusCode_MX_STATUS_CODE_WRITE_REFUSED:
			return wire.StatusBadNotWritable, err
		case mxpb.MxStatusCode_MX_STATUS_CODE_WRONG_TYPE:
			return wire.StatusBadTypeMismatch, err
		}
		return wire.StatusBad, err
	}
	return wire.StatusBadCommunicationErr, err
}

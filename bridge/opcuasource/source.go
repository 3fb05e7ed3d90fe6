package opcuasource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// Source is a bridge.Source on a redundant OPC UA server pair: a
// uaclient.Pair follows the servers' ServiceLevel, keeps a warm
// standby session and fails over; the source turns its data changes into
// updates and its promotions into refresh frames.
type Source struct {
	name string
	cfg  uaclient.PairConfig
	opts []uaclient.PairOption
	log  zerolog.Logger
	// monitoring holds the tags' own monitoring settings, by tag name.
	monitoring map[string]Monitoring

	mu     sync.Mutex
	pair   *uaclient.Pair
	h      bridge.Handler
	added  map[uint32]bool
	health bridge.Health
	// ready is set by the first snapshot's end: from then on a subscribe
	// reaches a server, which answers for each item. refused records a
	// subscribe refused before that, to be asked again (Restored) at once.
	ready   bool
	refused bool
	closed  bool
}

// ErrNotConnected is a Subscribe's error before the source's first data
// path is up: the bridge's guard retries, and the source asks for the
// subscribe again (Restored) the moment a server carries data, so that
// each tag gets the server's own answer.
var ErrNotConnected = errors.New("opcuasource: no server carries data yet")

// Option configures a Source. An option that cannot apply returns an
// error, which New returns.
type Option func(*options) error

type options struct {
	log        zerolog.Logger
	pair       []uaclient.PairOption
	monitoring map[string]Monitoring
}

// WithLogger logs through l, and so does the source's Pair (default: no
// logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithPairOptions passes opts to the source's uaclient.Pair: client
// options for security (Security.PairOptions returns them), or anything
// else the Pair takes.
func WithPairOptions(opts ...uaclient.PairOption) Option {
	return func(o *options) error { o.pair = append(o.pair, opts...); return nil }
}

// New checks cfg and returns a source named name on the pair of servers
// it names.
func New(name string, cfg uaclient.PairConfig, opts ...Option) (*Source, error) {
	if name == "" {
		return nil, errors.New("opcuasource: name is empty")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("opcuasource: source %q: %w", name, err)
	}
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("opcuasource: source %q: %w", name, err)
		}
	}
	return &Source{
		name: name, cfg: cfg, opts: o.pair, log: o.log, monitoring: o.monitoring,
		added:  map[uint32]bool{},
		health: bridge.Health{State: bridge.StateConnecting, Level: -1},
	}, nil
}

// Name implements Source.
func (s *Source) Name() string { return s.name }

// Start implements Source: it starts the Pair, which connects in the
// background, and returns at once; Health tells when data flows.
func (s *Source) Start(ctx context.Context, h bridge.Handler) error {
	opts := append([]uaclient.PairOption{
		uaclient.WithPairName(s.name),
		uaclient.WithLogger(s.log),
		uaclient.WithDataHandler(s.onData),
		uaclient.WithEventHandler(s.onEvent),
	}, s.opts...)
	if sn, ok := h.(bridge.StoreNotifier); ok {
		// A data message is acknowledged to the server only once the
		// sink stored its updates: until then the server keeps it, for
		// this Pair after a link blip or a successor to ask for again.
		// The updates reach h on the Pair's output goroutine before
		// its mark does, so the mark follows them into the sink.
		opts = append(opts, uaclient.WithAckAfterStore(sn.AfterStored))
	}
	p, err := uaclient.NewPair(s.cfg, opts...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		// Closed before it started: a Pair started now would run on
		// with nobody to close it.
		s.mu.Unlock()
		return uaclient.ErrClosed
	}
	s.pair, s.h = p, h
	s.mu.Unlock()
	if err := p.Start(ctx); err != nil {
		p.Close()
		return err
	}
	return nil
}

// onData runs on the Pair's output goroutine, in order.
func (s *Source) onData(u uaclient.Update) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		return
	}
	switch u.Kind {
	case uaclient.UpdateData, uaclient.UpdateRefreshValue:
		h.Update(u.Handle, fromDataValue(u.Value))
	case uaclient.UpdateRefreshStart:
		h.RefreshStart(fmt.Sprintf("%s on %s", u.Cause, u.Endpoint))
	case uaclient.UpdateRefreshEnd:
		s.mu.Lock()
		s.ready = true
		restore := s.refused
		s.refused = false
		s.mu.Unlock()
		h.RefreshEnd()
		if restore {
			h.Restored()
		}
	}
}

func (s *Source) onEvent(e uaclient.Event) {
	s.mu.Lock()
	p, h := s.pair, s.h
	s.mu.Unlock()
	if p == nil || h == nil {
		return
	}
	if e.Kind == uaclient.EventTakeover && e.Transferred {
		// The predecessor's subscription was taken over: data flows
		// without a snapshot, so no refresh end says that it does.
		s.mu.Lock()
		s.ready = true
		restore := s.refused
		s.refused = false
		s.mu.Unlock()
		if restore {
			h.Restored()
		}
	}
	hl := s.healthOf(p.Status())
	if e.Kind == uaclient.EventFailover {
		hl.LastSwitch, hl.LastAt = e.String(), e.At
		hl.LastSwitchCause, hl.LastSwitchTook = e.Cause.String(), e.Duration
	} else {
		s.mu.Lock()
		hl.LastSwitch, hl.LastAt = s.health.LastSwitch, s.health.LastAt
		hl.LastSwitchCause, hl.LastSwitchTook = s.health.LastSwitchCause, s.health.LastSwitchTook
		s.mu.Unlock()
	}
	s.mu.Lock()
	changed := hl != s.health
	s.health = hl
	s.mu.Unlock()
	if changed {
		h.HealthChanged(hl)
	}
}

func (s *Source) healthOf(st uaclient.PairStatus) bridge.Health {
	h := bridge.Health{Endpoint: st.ActiveURL, Level: -1}
	if v, ok := st.ActiveLevel.Value(); ok {
		h.Level = int(v)
	}
	switch {
	case !st.Connected && st.Switching:
		h.State = bridge.StateConnecting
		h.Detail = lastErrDetail(st.LastErr)
	case !st.Connected:
		h.State = bridge.StateDown
		h.Detail = lastErrDetail(st.LastErr)
	case !st.ActiveLevel.Healthy():
		h.State = bridge.StateDegraded
		h.Detail = "the active server reports " + st.ActiveLevel.String()
		if st.Redundancy.SameServer {
			h.Detail += "; no standby: " + st.Redundancy.Problem
		}
	case st.Redundancy.SameServer:
		// A Healthy server takes writes, but nothing stands by for it:
		// both endpoints reach it.
		h.State = bridge.StateDegraded
		h.Writable = true
		h.Detail = "no standby: " + st.Redundancy.Problem
	default:
		h.State = bridge.StateConnected
		h.Writable = true
		// The warnings first: they are what an operator has to act on.
		parts := slices.Clone(st.Redundancy.Warnings)
		if pt := st.Partner; pt.Enabled && pt.URL == "" && pt.Problem != "" {
			parts = append([]string{"no backup: partner discovery found none: " + pt.Problem}, parts...)
		}
		if pt := st.Partner; pt.URL != "" {
			parts = append(parts, fmt.Sprintf("backup %s found by partner discovery (%s)", pt.URL, pt.ApplicationURI))
		}
		if d := linkDetail(st.Link); d != "" {
			parts = append(parts, d)
		}
		h.Detail = strings.Join(parts, "; ")
	}
	return h
}

// lastErrDetail is what a source without data says of why.
func lastErrDetail(err error) string {
	if err == nil {
		return ""
	}
	return "last error: " + err.Error()
}

// linkDetail describes what the active server granted for riding out a
// link blip: the session timeout and subscription lifetimes as revised,
// and the longest blip they let recover without loss.
func linkDetail(lp uaclient.LinkParams) string {
	if lp.SessionTimeout == 0 {
		return ""
	}
	return fmt.Sprintf("blips up to %v recoverable (session timeout %v, subscription lifetimes %v and %v, keep-alive counts %d and %d)",
		lp.Recoverable, lp.SessionTimeout, lp.Health.Lifetime(), lp.Data.Lifetime(), lp.Health.KeepAliveCount, lp.Data.KeepAliveCount)
}

// Stats are the source's Pair's counters.
type Stats struct {
	// Failovers counts the switches to the other server.
	Failovers int
	// Recoveries counts link blips ridden out without a new session's
	// snapshot; Republished the data changes they asked for again.
	Recoveries  int
	Republished uint64
	// Link are the active session's parameters as its server revised
	// them.
	Link uaclient.LinkParams
	// Redundancy is the Pair's check of its two servers against what they
	// say of themselves, and Servers what each said (see
	// uaclient.PairStatus); the health shows what the check found.
	Redundancy uaclient.RedundancyCheck
	Servers    [2]uaclient.ServerInfo
	// Partner is the partner discovery of a source with discoverPartner:
	// the backup found, or why none was.
	Partner uaclient.PartnerStatus
	// SuccessorTransfers counts the predecessor's data subscriptions
	// taken over at start, SuccessorFallbacks the takeovers that failed
	// (uaclient.WithTakeover).
	SuccessorTransfers int
	SuccessorFallbacks int
}

// Stats returns the counters; zero before Start.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	p := s.pair
	s.mu.Unlock()
	if p == nil {
		return Stats{}
	}
	st := p.Status()
	return Stats{Failovers: st.Failovers, Recoveries: st.Recoveries, Republished: st.Republished, Link: st.Link,
		Redundancy: st.Redundancy, Servers: st.Servers, Partner: st.Partner,
		SuccessorTransfers: st.SuccessorTransfers, SuccessorFallbacks: st.SuccessorFallbacks}
}

var _ bridge.SuccessorReporter = (*Source)(nil)

// SuccessorTakeovers implements bridge.SuccessorReporter.
func (s *Source) SuccessorTakeovers() (transferred, fallbacks uint64) {
	st := s.Stats()
	return uint64(st.SuccessorTransfers), uint64(st.SuccessorFallbacks)
}

var _ bridge.LinkReporter = (*Source)(nil)

// LinkRecoveries implements bridge.LinkReporter: link blips ridden out on
// the same session (or by a transfer of its subscriptions), and the data
// changes asked for again (Republish) in them.
func (s *Source) LinkRecoveries() (recovered, republished uint64) {
	st := s.Stats()
	return uint64(st.Recoveries), uint64(st.Republished)
}

// Subscribe implements Source: the tags become data items of the Pair,
// keyed by their handle, and survive its failovers.
func (s *Source) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	s.mu.Lock()
	p := s.pair
	if p != nil && !s.ready {
		s.refused = true
		s.mu.Unlock()
		if err := p.Status().LastErr; err != nil {
			return nil, fmt.Errorf("%w (last error: %v)", ErrNotConnected, err)
		}
		return nil, ErrNotConnected
	}
	errs := make([]error, len(tags))
	var items []uaclient.Item
	var idx []int
	for i, t := range tags {
		if s.added[t.Handle] {
			continue // already a data item: accepted again
		}
		it := uaclient.Item{Handle: t.Handle, NodeID: t.Address}
		if m, ok := s.monitoring[t.Name]; ok {
			m.apply(&it)
		}
		items = append(items, it)
		idx = append(idx, i)
	}
	s.mu.Unlock()
	if p == nil {
		return nil, errors.New("source not started")
	}
	if len(items) == 0 {
		return errs, nil
	}
	res, err := p.AddItems(ctx, items)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range res {
		if k >= len(idx) {
			break
		}
		i := idx[k]
		if r.Err != nil {
			errs[i] = fmt.Errorf("tag %q (%s): %w", tags[i].Name, tags[i].Address, r.Err)
			continue
		}
		s.added[tags[i].Handle] = true
	}
	return errs, nil
}

// Unsubscribe implements Source: the tags' items are deleted at the
// server (RemoveItems waits for it), and no update of them follows. Every
// handle is asked for, also one whose Subscribe did not say it was added:
// a Subscribe cancelled while the Pair created its items left them there.
func (s *Source) Unsubscribe(ctx context.Context, tags []bridge.Tag) error {
	s.mu.Lock()
	p := s.pair
	handles := make([]uint32, 0, len(tags))
	for _, t := range tags {
		handles = append(handles, t.Handle)
		delete(s.added, t.Handle)
	}
	s.mu.Unlock()
	if p == nil || len(handles) == 0 {
		return nil
	}
	var errs []error
	for _, err := range uaclientErrors(p.RemoveItems(ctx, handles)) {
		if !errors.Is(err, uaclient.ErrUnknownHandle) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// uaclientErrors splits the errors.Join of RemoveItems.
func uaclientErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// SetMonitoring replaces the tags' monitoring overrides, by tag name
// (WithMonitoring's). Tags subscribed from then on get them; a tag
// already subscribed keeps its item until the bridge subscribes it again
// (bridge.TagUpdate.Resubscribe).
func (s *Source) SetMonitoring(byTag map[string]Monitoring) error {
	for name, m := range byTag {
		if err := m.Validate(fmt.Sprintf("tag %q: ", name)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.monitoring = byTag
	s.mu.Unlock()
	return nil
}

// Write implements Source: the Pair writes on the active endpoint only
// while it reports a Healthy ServiceLevel, never on a standby.
func (s *Source) Write(ctx context.Context, tag bridge.Tag, v any) (wire.StatusCode, error) {
	s.mu.Lock()
	p := s.pair
	s.mu.Unlock()
	if p == nil {
		return 0, bridge.ErrNotWritableNow
	}
	code, err := p.WriteNode(ctx, tag.Address, toWriteValue(v))
	if err != nil {
		if errors.Is(err, uaclient.ErrWriteRefused) {
			return wire.StatusCode(code), fmt.Errorf("%w: %v", bridge.ErrNotWritableNow, err)
		}
		return wire.StatusCode(code), err
	}
	return wire.StatusCode(code), nil
}

// toWriteValue gives gopcua a value it encodes as the matching built-in
// type: the bridge's types are already gopcua's, except that a DateTime
// must be UTC.
func toWriteValue(v any) any {
	if t, ok := v.(time.Time); ok {
		return t.UTC()
	}
	return v
}

// Health implements Source.
func (s *Source) Health() bridge.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// Pair returns the source's Pair, once started.
func (s *Source) Pair() *uaclient.Pair {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pair
}

// Close implements Source.
func (s *Source) Close() error {
	s.mu.Lock()
	p := s.pair
	s.closed = true
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
	return nil
}

// fromDataValue turns an OPC UA DataValue into an Update. A value of a type
// the bridge cannot carry becomes a Bad update that says so.
func fromDataValue(dv *ua.DataValue) wire.Update {
	if dv == nil {
		return wire.Update{Status: wire.StatusBadWaitingForInit}
	}
	u := wire.Update{
		Status:     wire.StatusCode(dv.Status),
		SourceTime: dv.SourceTimestamp,
		ServerTime: dv.ServerTimestamp,
	}
	if dv.EncodingMask&ua.DataValueStatusCode == 0 {
		u.Status = wire.StatusGood
	}
	if dv.Value == nil {
		return u
	}
	v := dv.Value.Value()
	switch x := v.(type) {
	case *ua.LocalizedText:
		// A display text: its text is the value a consumer wants.
		if x == nil {
			v = ""
		} else {
			v = x.Text
		}
	}
	if _, ok := wire.TypeOf(v); !ok {
		return wire.Unsupported("", v, u.SourceTime, u.ServerTime)
	}
	u.Value = v
	return u
}

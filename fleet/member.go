package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Key prefixes in the bucket.
const (
	leasePrefix = "lease."
	relayPrefix = "relay."
)

// holding is the value of a lease or membership key: who wrote it, and
// which incarnation of that relay (so that a restarted relay, or a second
// one with the same ID, is told apart).
type holding struct {
	Relay string    `json:"relay"`
	Epoch string    `json:"epoch"`
	Since time.Time `json:"since"`
}

// lease is a pair this member owns.
type lease struct {
	rev    uint64    // the key's current revision, for the next Update
	token  uint64    // the revision at which it was won
	lastOK time.Time // when the last successful write was sent
}

// releasing is a pair inside its handover overlap.
type releasing struct {
	l     *lease
	until time.Time
	cause Cause
}

// holder is what the watcher last showed of a lease key.
type holder struct {
	relay, epoch string
	rev          uint64
	// guessed is when a lost create marked the key held by a relay the
	// watcher has not shown yet; zero for a holder the watcher showed.
	guessed time.Time
}

// Option configures a Member.
type Option func(*options) error

type options struct {
	log     zerolog.Logger
	handler func(Event)
	release func(ctx context.Context, pair string)
}

// WithReleaseHook calls h before the member releases a pair it hands over
// (rebalance, shutdown), while its lease is still held and valid: the
// next owner cannot win it before h returns. h gets at most a renewal
// period (ctx ends then) and runs on the member's goroutine, whose
// renewals wait for it. A relay whose next owner takes the source's
// server-side state over (fleet.handoff) stops its own use of that state
// in h and records it as final: break before make, so that the two never
// run it at once. Leases that expire or are taken do not call h.
func WithReleaseHook(h func(ctx context.Context, pair string)) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("fleet: WithReleaseHook: nil hook")
		}
		o.release = h
		return nil
	}
}

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithHandler calls h for every ownership change, on the member's
// goroutine and in order. h must not block: a member that cannot renew
// its leases loses them. A lease that expires or is taken is reported
// lost before another member can win it (the member fences itself first);
// a pair handed over is reported lost when its overlap ends (see
// Config.Overlap), after the next owner could win it.
func WithHandler(h func(Event)) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("fleet: WithHandler: nil handler")
		}
		o.handler = h
		return nil
	}
}

// Member is one relay's membership in a fleet. Join starts it; Close
// hands its pairs over and stops it.
type Member struct {
	cfg     Config
	log     zerolog.Logger
	handler func(Event)
	// releaseHook runs before a handed-over pair's lease is released
	// (WithReleaseHook); nil without one.
	releaseHook func(ctx context.Context, pair string)
	nc          *nats.Conn
	kv          jetstream.KeyValue
	epoch       string
	value       []byte

	mu    sync.Mutex
	owned map[string]*lease
	// releasing holds pairs handed over whose overlap has not ended: the
	// member may still publish for them (Valid) until the time given.
	releasing map[string]releasing
	stats     Stats
	fatal     error
	selfRev   uint64

	// Only the run goroutine touches these.
	relays    map[string]bool
	holders   map[string]holder
	freeSince map[string]time.Time
	lastOwner map[string]string    // the relay whose lease on a free pair ended
	behind    map[string]time.Time // owned pairs where another ranks first, since
	watcher   jetstream.KeyWatcher
	syncing   bool      // the watcher is still sending its initial values
	lastEvent time.Time // when the watcher last sent anything
	selfOK    time.Time // when the last membership renewal that succeeded was sent

	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// ErrSameID is returned by Join when a live member already uses the relay
// ID.
var ErrSameID = errors.New("fleet: relay ID in use")

// Join joins the fleet over nc: it opens (or creates) the bucket, claims
// the relay's membership key, reads the bucket and starts the goroutine
// that wins, renews and hands over leases. A relay ID held by a live
// member is refused with ErrSameID as soon as that member renews its key
// (within a renewal period, a quarter of the lease TTL); one held by a
// relay that crashed is claimed once its key expires (within a TTL), so
// that a restart is not refused. ctx bounds Join only.
func Join(ctx context.Context, nc *nats.Conn, c Config, opts ...Option) (*Member, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o := options{log: zerolog.Nop(), handler: func(Event) {}}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	kv, err := openBucket(ctx, js, c)
	if err != nil {
		return nil, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	m := &Member{
		cfg: c, log: o.log.With().Str("component", "fleet").Str("relay", c.RelayID).Logger(),
		handler: o.handler, releaseHook: o.release, nc: nc, kv: kv, epoch: hex.EncodeToString(nonce[:]),
		owned: map[string]*lease{}, releasing: map[string]releasing{}, relays: map[string]bool{}, holders: map[string]holder{},
		freeSince: map[string]time.Time{}, lastOwner: map[string]string{}, behind: map[string]time.Time{},
		done: make(chan struct{}),
	}
	m.value, _ = json.Marshal(holding{Relay: c.RelayID, Epoch: m.epoch, Since: time.Now().UTC()})
	if err := m.claimID(ctx); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.watch(ctx); err != nil {
		m.cancel()
		m.releaseID()
		return nil, err
	}
	go m.run()
	return m, nil
}

// watch starts the bucket watcher and applies its initial values.
func (m *Member) watch(ctx context.Context) error {
	if err := m.startWatch(); err != nil {
		return err
	}
	for m.syncing {
		select {
		case <-ctx.Done():
			m.watcher.Stop()
			return ctx.Err()
		case e, ok := <-m.watcher.Updates():
			if !ok {
				return fmt.Errorf("fleet: watch bucket %q: watcher stopped", m.cfg.Bucket)
			}
			m.onEntry(e)
		}
	}
	return nil
}

// startWatch (re)starts the watcher; the state it rebuilds is applied as
// its initial values arrive.
func (m *Member) startWatch() error {
	if m.watcher != nil {
		m.watcher.Stop()
		m.watcher = nil
	}
	w, err := m.kv.WatchAll(m.ctx)
	if err != nil {
		return fmt.Errorf("fleet: watch bucket %q: %w", m.cfg.Bucket, err)
	}
	m.watcher, m.syncing, m.lastEvent = w, true, time.Now()
	clear(m.relays)
	clear(m.holders)
	return nil
}

// onEntry applies one watcher entry; nil ends the initial values.
func (m *Member) onEntry(e jetstream.KeyValueEntry) {
	m.lastEvent = time.Now()
	if e != nil {
		m.apply(e)
		return
	}
	if m.syncing {
		m.syncing = false
		for _, p := range m.cfg.Pairs {
			if _, held := m.holders[p]; !held {
				m.freeSince[p] = m.lastEvent
			}
		}
	}
}

// Valid reports whether the member may publish for pair now, and the
// lease's fencing token: it owns the pair and its last successful renewal
// is recent enough that the lease cannot expire within the fence margin.
func (m *Member) Valid(pair string) (token uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.owned[pair]
	if l == nil {
		if r, ok := m.releasing[pair]; ok && time.Now().Before(r.until) {
			return r.l.token, true
		}
		return 0, false
	}
	if time.Since(l.lastOK) >= m.cfg.LeaseTTL-m.cfg.fenceMargin() {
		return 0, false
	}
	return l.token, true
}

// Owned returns the pairs the member owns now, sorted.
func (m *Member) Owned() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.owned))
	for p := range m.owned {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Stats returns the member's counters.
func (m *Member) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Owned = len(m.owned)
	return s
}

// Err returns why the member stopped on its own (ErrSameID), or nil.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fatal
}

// ID returns the member's relay ID.
func (m *Member) ID() string { return m.cfg.RelayID }

// Config returns the member's configuration, defaults applied.
func (m *Member) Config() Config { return m.cfg }

func (m *Member) run() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.renewEvery())
	defer t.Stop()
	rt := time.NewTimer(time.Hour)
	defer rt.Stop()
	// Join read the bucket: free pairs are taken now, not a renewal
	// period later.
	m.reconcile()
	for {
		if next, ok := m.nextRelease(); ok {
			rt.Reset(time.Until(next))
		}
		var updates <-chan jetstream.KeyValueEntry
		if m.watcher != nil {
			updates = m.watcher.Updates()
		}
		select {
		case <-m.ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				// The watcher ended (its connection closed); a new one
				// is tried on the next tick.
				m.watcher = nil
				continue
			}
			m.onEntry(e)
			if !m.syncing {
				m.reconcile()
			}
		case <-rt.C:
			m.endReleases(time.Now())
		case <-t.C:
			m.renew()
			if m.Err() != nil {
				return
			}
			// The member's own renewals are puts the watcher must show:
			// when it has shown nothing for two periods in which they
			// succeeded, it is stuck (its consumer was on a node that
			// died) and is started again.
			if m.watcher == nil || m.selfOK.Sub(m.lastEvent) > 2*m.cfg.renewEvery() {
				if m.watcher != nil {
					m.log.Warn().Msg("bucket watcher silent; restarting it")
				}
				if err := m.startWatch(); err != nil {
					m.log.Debug().Err(err).Msg("bucket watch failed")
				}
			}
			if !m.syncing {
				m.reconcile()
			}
		}
	}
}

// apply records one change of the bucket as the watcher shows it.
func (m *Member) apply(e jetstream.KeyValueEntry) {
	key, now := e.Key(), time.Now()
	put := e.Operation() == jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(key, relayPrefix):
		m.relays[strings.TrimPrefix(key, relayPrefix)] = put
		if !put {
			delete(m.relays, strings.TrimPrefix(key, relayPrefix))
		}
	case strings.HasPrefix(key, leasePrefix):
		pair := strings.TrimPrefix(key, leasePrefix)
		if !put {
			h, ok := m.holders[pair]
			if ok && h.rev > e.Revision() {
				return // an old marker, replayed
			}
			if ok {
				m.lastOwner[pair] = h.relay
			}
			delete(m.holders, pair)
			m.freeSince[pair] = now
			m.mu.Lock()
			_, mine := m.owned[pair]
			m.mu.Unlock()
			if mine {
				m.drop(pair, CauseExpired)
			}
			return
		}
		var h holding
		_ = json.Unmarshal(e.Value(), &h)
		m.holders[pair] = holder{relay: h.Relay, epoch: h.Epoch, rev: e.Revision()}
		if h.Relay != m.cfg.RelayID || h.Epoch != m.epoch {
			m.mu.Lock()
			_, mine := m.owned[pair]
			m.mu.Unlock()
			if mine {
				m.drop(pair, CauseTaken)
			}
		}
	}
}

// live returns the relay IDs the bucket shows live.
func (m *Member) live() []string {
	out := make([]string, 0, len(m.relays))
	for id := range m.relays {
		out = append(out, id)
	}
	return out
}

// reconcile wins free pairs this member ranks first for, hands over owned
// pairs another ranks first for (after the dwell), and gives up leases
// whose renewals failed for a whole TTL.
func (m *Member) reconcile() {
	now := time.Now()
	live := m.live()
	m.mu.Lock()
	m.stats.Live = len(live)
	m.mu.Unlock()
	self := m.cfg.RelayID
	for _, pair := range m.cfg.Pairs {
		m.mu.Lock()
		l := m.owned[pair]
		m.mu.Unlock()
		ranked := Rank(pair, live)
		if l != nil {
			if now.Sub(l.lastOK) >= m.cfg.LeaseTTL {
				m.drop(pair, CauseExpired)
				continue
			}
			if len(ranked) > 0 && ranked[0] != self && m.relays[self] {
				since, ok := m.behind[pair]
				if !ok {
					m.behind[pair] = now
					continue
				}
				if now.Sub(since) >= m.cfg.Dwell {
					m.handover(pair, CauseHandover)
				}
				continue
			}
			delete(m.behind, pair)
			continue
		}
		if h, held := m.holders[pair]; held {
			// A holder guessed from a lost create that the watcher has
			// not shown within a renewal period is no one's: a winner's
			// lease is a put the watcher shows at once.
			if h.guessed.IsZero() || now.Sub(h.guessed) < m.cfg.renewEvery() {
				continue
			}
			delete(m.holders, pair)
		}
		// The relay whose lease just ended ranks last: it handed the
		// pair over, or it could not renew (it is dead, or cut off and
		// fenced) while its membership key may still show it live.
		if last := m.lastOwner[pair]; last != "" && last != self {
			if i := slices.Index(ranked, last); i >= 0 {
				ranked = append(slices.Delete(slices.Clone(ranked), i, i+1), last)
			}
		}
		pos := -1
		for i, r := range ranked {
			if r == self {
				pos = i
			}
		}
		if pos < 0 {
			continue // not live: the membership key is being renewed again
		}
		// The first in rank takes a free pair at once; the others wait
		// a renewal period per place, in case the first is slow or dead.
		if now.Sub(m.freeSince[pair]) < time.Duration(pos)*m.cfg.renewEvery() {
			continue
		}
		m.acquire(pair)
	}
}

// drop forgets an owned pair and tells the handler; the lease itself is
// left alone (it is gone, or another's).
func (m *Member) drop(pair string, cause Cause) {
	m.mu.Lock()
	l := m.owned[pair]
	delete(m.owned, pair)
	if l != nil {
		m.stats.Lost++
	}
	m.mu.Unlock()
	delete(m.behind, pair)
	if l == nil {
		return
	}
	m.log.Warn().Str("pair", pair).Str("cause", string(cause)).Msg("pair lost")
	m.handler(Event{Pair: pair, Owned: false, Token: l.token, Cause: cause, At: time.Now()})
}

// Close hands every owned pair over (the handler hears CauseShutdown for
// each before its lease is deleted), deletes the membership key and stops
// the member. ctx bounds the deletes. It is idempotent.
func (m *Member) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.cancel()
		<-m.done
		if m.watcher != nil {
			m.watcher.Stop()
		}
		var errs []error
		// The membership key goes first, so that the members that see
		// the leases go rank without this one.
		if m.Err() == nil {
			m.mu.Lock()
			rev := m.selfRev
			m.mu.Unlock()
			if err := m.release(ctx, relayPrefix+m.cfg.RelayID, rev); err != nil {
				errs = append(errs, fmt.Errorf("fleet: leave: %w", err))
			}
		}
		owned := m.Owned()
		m.runReleaseHooks(ctx, owned)
		until := time.Now().Add(m.cfg.overlap())
		for _, p := range owned {
			m.mu.Lock()
			l := m.owned[p]
			delete(m.owned, p)
			m.releasing[p] = releasing{l: l, until: until, cause: CauseShutdown}
			m.stats.Handovers++
			m.mu.Unlock()
			if err := m.release(ctx, leasePrefix+p, l.rev); err != nil {
				errs = append(errs, fmt.Errorf("fleet: hand over %s: %w", p, err))
			}
		}
		// Make before break: the pairs stay valid here for the overlap,
		// while the next owners start.
		if next, ok := m.nextRelease(); ok {
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(next)):
			}
		}
		m.mu.Lock()
		for p, r := range m.releasing {
			r.until = time.Time{}
			m.releasing[p] = r
		}
		m.mu.Unlock()
		m.endReleases(time.Now())
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

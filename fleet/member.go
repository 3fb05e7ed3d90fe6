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
}

// Option configures a Member.
type Option func(*options) error

type options struct {
	log     zerolog.Logger
	handler func(Event)
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
	kv      jetstream.KeyValue
	epoch   string
	value   []byte

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
// member is refused with ErrSameID after one lease TTL (a crashed relay's
// key expires within that time, so a restart is not refused). ctx bounds
// Join only.
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
		handler: o.handler, kv: kv, epoch: hex.EncodeToString(nonce[:]),
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

// claimID creates the membership key, retrying for one TTL while another
// holds it.
func (m *Member) claimID(ctx context.Context) error {
	deadline := time.Now().Add(m.cfg.LeaseTTL + m.cfg.LeaseTTL/2)
	for {
		sent := time.Now()
		rev, err := m.kv.Create(ctx, relayPrefix+m.cfg.RelayID, m.value)
		if err == nil {
			m.selfRev, m.selfOK = rev, sent
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("fleet: join as %q: %w", m.cfg.RelayID, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: relay %q is live in bucket %q (its key was renewed within the last %v); give each relay of a fleet its own relayId",
				ErrSameID, m.cfg.RelayID, m.cfg.Bucket, m.cfg.LeaseTTL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.cfg.renewEvery()):
		}
	}
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
		if _, held := m.holders[pair]; held {
			continue
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

// acquire tries to win a free pair's lease.
func (m *Member) acquire(pair string) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.renewEvery())
	defer cancel()
	sent := time.Now()
	rev, err := m.kv.Create(ctx, leasePrefix+pair, m.value)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Someone else won; the watcher will say who.
			m.holders[pair] = holder{relay: "?"}
		} else {
			m.log.Debug().Err(err).Str("pair", pair).Msg("lease create failed")
		}
		return
	}
	m.holders[pair] = holder{relay: m.cfg.RelayID, epoch: m.epoch, rev: rev}
	delete(m.behind, pair)
	m.mu.Lock()
	delete(m.releasing, pair) // won back inside its overlap: never stopped
	m.owned[pair] = &lease{rev: rev, token: rev, lastOK: sent}
	m.stats.Gained++
	m.mu.Unlock()
	m.log.Info().Str("pair", pair).Uint64("token", rev).Msg("pair owned")
	m.handler(Event{Pair: pair, Owned: true, Token: rev, Cause: CauseFree, At: time.Now()})
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

// handover releases pair: it deletes the lease at the revision this
// member wrote last, so that the next in rank wins it at once, and keeps
// the pair valid for the overlap; the handler hears the loss when the
// overlap ends (at once without one).
func (m *Member) handover(pair string, cause Cause) {
	m.mu.Lock()
	l := m.owned[pair]
	if l == nil {
		m.mu.Unlock()
		return
	}
	delete(m.owned, pair)
	m.releasing[pair] = releasing{l: l, until: time.Now().Add(m.cfg.overlap()), cause: cause}
	m.stats.Handovers++
	m.mu.Unlock()
	delete(m.behind, pair)
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.renewEvery())
	defer cancel()
	if err := m.kv.Delete(ctx, leasePrefix+pair, jetstream.LastRevision(l.rev)); err != nil {
		m.log.Debug().Err(err).Str("pair", pair).Msg("lease delete failed; it expires")
	}
	if m.cfg.overlap() == 0 {
		m.endReleases(time.Now())
	}
}

// nextRelease returns when the earliest overlap ends.
func (m *Member) nextRelease() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for _, r := range m.releasing {
		if next.IsZero() || r.until.Before(next) {
			next = r.until
		}
	}
	return next, !next.IsZero()
}

// endReleases tells the handler of every handover whose overlap ended by
// now.
func (m *Member) endReleases(now time.Time) {
	m.mu.Lock()
	var ended []Event
	for p, r := range m.releasing {
		if !now.Before(r.until) {
			delete(m.releasing, p)
			m.stats.Lost++
			ended = append(ended, Event{Pair: p, Owned: false, Token: r.l.token, Cause: r.cause, At: now})
		}
	}
	m.mu.Unlock()
	sort.Slice(ended, func(i, j int) bool { return ended[i].Pair < ended[j].Pair })
	for _, e := range ended {
		m.log.Info().Str("pair", e.Pair).Str("cause", string(e.Cause)).Msg("pair handed over")
		m.handler(e)
	}
}

// renew renews the membership key, then every owned lease, inside one
// renewal period: when the KV stream is unavailable the whole round fails
// fast and the next one tries again.
func (m *Member) renew() {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.renewEvery())
	defer cancel()
	m.renewID(ctx)
	m.mu.Lock()
	pairs := make([]string, 0, len(m.owned))
	for p := range m.owned {
		pairs = append(pairs, p)
	}
	m.mu.Unlock()
	for _, pair := range pairs {
		m.mu.Lock()
		l := m.owned[pair]
		m.mu.Unlock()
		if l == nil {
			continue
		}
		sent := time.Now()
		rev, err := m.kv.Update(ctx, leasePrefix+pair, m.value, l.rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// The write may have landed with its reply lost: the key
			// is still ours if it holds our value.
			if e, gerr := m.kv.Get(ctx, leasePrefix+pair); gerr == nil && e.Revision() > l.rev && string(e.Value()) == string(m.value) {
				rev, err = e.Revision(), nil
			} else if gerr == nil || errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted) {
				m.drop(pair, CauseTaken)
				continue
			}
		}
		if err != nil {
			m.mu.Lock()
			m.stats.RenewFailures++
			m.mu.Unlock()
			m.log.Debug().Err(err).Str("pair", pair).Msg("lease renewal failed")
			continue
		}
		m.mu.Lock()
		if cur := m.owned[pair]; cur == l {
			l.rev, l.lastOK = rev, sent
		}
		m.mu.Unlock()
	}
}

// renewID renews the membership key. A key that expired (the member was
// cut off for a TTL) is created again; one that holds another epoch means
// a second member with this ID: this one gives up.
func (m *Member) renewID(ctx context.Context) {
	key := relayPrefix + m.cfg.RelayID
	m.mu.Lock()
	rev := m.selfRev
	m.mu.Unlock()
	sent := time.Now()
	nrev, err := m.kv.Update(ctx, key, m.value, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		e, gerr := m.kv.Get(ctx, key)
		switch {
		case gerr == nil && string(e.Value()) != string(m.value):
			m.giveUp()
			return
		case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
			nrev, err = m.kv.Create(ctx, key, m.value)
		case gerr == nil:
			nrev, err = e.Revision(), nil
		}
	}
	if err != nil {
		m.log.Debug().Err(err).Msg("membership renewal failed")
		return
	}
	m.selfOK = sent
	m.mu.Lock()
	m.selfRev = nrev
	m.mu.Unlock()
}

// giveUp drops every pair when another live member has this relay ID.
func (m *Member) giveUp() {
	for _, p := range m.Owned() {
		m.drop(p, CauseSameID)
	}
	m.mu.Lock()
	m.fatal = fmt.Errorf("%w: another member took relay ID %q in bucket %q", ErrSameID, m.cfg.RelayID, m.cfg.Bucket)
	m.mu.Unlock()
	m.log.Error().Err(m.fatal).Msg("fleet membership given up")
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
			if err := m.kv.Delete(ctx, relayPrefix+m.cfg.RelayID, jetstream.LastRevision(rev)); err != nil {
				errs = append(errs, fmt.Errorf("fleet: leave: %w", err))
			}
		}
		until := time.Now().Add(m.cfg.overlap())
		for _, p := range m.Owned() {
			m.mu.Lock()
			l := m.owned[p]
			delete(m.owned, p)
			m.releasing[p] = releasing{l: l, until: until, cause: CauseShutdown}
			m.stats.Handovers++
			m.mu.Unlock()
			if err := m.kv.Delete(ctx, leasePrefix+p, jetstream.LastRevision(l.rev)); err != nil {
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

// releaseID deletes the membership key after a failed Join.
func (m *Member) releaseID() {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.LeaseTTL)
	defer cancel()
	m.kv.Delete(ctx, relayPrefix+m.cfg.RelayID, jetstream.LastRevision(m.selfRev))
}

package edge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Option configures a Monitor.
type Option func(*Monitor)

// WithLogger logs through l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(m *Monitor) { m.log = l }
}

// Monitor checks an edge site every Config.CheckInterval, on the relay's
// own active connection, and keeps the last report: what the relay's
// metrics and `apbridge edge status` show. It remembers the hub's last
// known position in the site stream, so that during a WAN outage, when
// the hub cannot be asked, the absorb time still counts what the hub
// lacks. It logs a warning when a check finds a new problem and when the
// problems clear.
type Monitor struct {
	conn func() *nats.Conn
	cfg  Config
	site Site
	log  zerolog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// checkMu makes checks one at a time, so that each starts from the
	// one before (the hub's last known position).
	checkMu sync.Mutex
	mu      sync.Mutex
	last    *Report
	lastErr error
}

// Start starts a Monitor of site with cfg (defaults applied), checking
// on the connection conn returns at each check (the ApConnection's
// active one). Close stops it.
func Start(conn func() *nats.Conn, cfg Config, site Site, opts ...Option) *Monitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Monitor{conn: conn, cfg: cfg.WithDefaults(), site: site, log: zerolog.Nop(), cancel: cancel, done: make(chan struct{})}
	for _, o := range opts {
		o(m)
	}
	m.log = m.log.With().Str("component", "edge").Str("site_stream", site.Stream).Str("hub_stream", cfg.Hub.Stream).Logger()
	go m.loop(ctx)
	return m
}

func (m *Monitor) loop(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(m.cfg.CheckInterval)
	defer t.Stop()
	for {
		m.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check checks now, keeps the report for Report and returns it.
func (m *Monitor) Check(ctx context.Context) (Report, error) {
	m.checkMu.Lock()
	defer m.checkMu.Unlock()
	m.mu.Lock()
	prev := m.last
	m.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, max(m.cfg.CheckInterval, 3*apiTimeout))
	defer cancel()
	r, err := check(cctx, m.conn(), m.cfg, m.site, prev)
	if ctx.Err() != nil {
		return r, err
	}
	m.mu.Lock()
	oldErr := m.lastErr
	var oldWarn []string
	if m.last != nil {
		oldWarn = m.last.Warnings
	}
	m.lastErr = err
	if err == nil {
		m.last = &r
	}
	m.mu.Unlock()
	switch {
	case err != nil && (oldErr == nil || oldErr.Error() != err.Error()):
		m.log.Warn().Err(err).Msg("edge check failed")
	case err == nil:
		for _, w := range r.Warnings {
			if !containsLike(oldWarn, w) {
				m.log.Warn().Str("warning", w).Dur("absorb", r.Absorb).Str("limit", r.AbsorbLimit).Msg("edge site")
			}
		}
		if len(r.Warnings) == 0 && (len(oldWarn) > 0 || oldErr != nil) {
			m.log.Info().Dur("absorb", r.Absorb).Str("limit", r.AbsorbLimit).Bool("hub_caught_up", r.Hub.CaughtUp).Msg("edge site healthy again")
		}
	}
	return r, err
}

// containsLike reports whether list has a warning of w's kind: the same
// text up to its first figure, so that an absorb time that moves from
// check to check is not logged each time.
func containsLike(list []string, w string) bool {
	key := func(s string) string {
		for i, r := range s {
			if r >= '0' && r <= '9' {
				return s[:i]
			}
		}
		return s
	}
	return slices.ContainsFunc(list, func(s string) bool { return key(s) == key(w) })
}

// ErrNotChecked is Report's error before the first check has finished.
var ErrNotChecked = errors.New("edge: not checked yet")

// Report returns the last successful check and the error of the last
// check (nil when it succeeded).
func (m *Monitor) Report() (Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		if m.lastErr != nil {
			return Report{}, m.lastErr
		}
		return Report{}, ErrNotChecked
	}
	r := *m.last
	r.Warnings = slices.Clone(r.Warnings)
	return r, m.lastErr
}

// Close stops the checks and waits for the one running. It is idempotent.
func (m *Monitor) Close() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
	})
}

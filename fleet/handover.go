package fleet

import (
	"context"
	"sort"
	"sync"
	"time"
)

// handover releases pair: it deletes the lease at the revision this
// member wrote last, so that the next in rank wins it at once, and keeps
// the pair valid for the overlap; the handler hears the loss when the
// overlap ends (at once without one).
func (m *Member) handover(pair string, cause Cause) {
	m.mu.Lock()
	l := m.owned[pair]
	m.mu.Unlock()
	if l == nil {
		return
	}
	m.runReleaseHooks(m.ctx, []string{pair})
	m.mu.Lock()
	if m.owned[pair] != l {
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
	if err := m.release(ctx, leasePrefix+pair, l.rev); err != nil {
		m.log.Debug().Err(err).Str("pair", pair).Msg("lease delete failed; it expires")
	}
	if m.cfg.overlap() == 0 {
		m.endReleases(time.Now())
	}
}

// runReleaseHooks calls the release hook (WithReleaseHook) for pairs at
// once and waits for them, at most a renewal period or until ctx ends:
// the leases must stay valid until they are released.
func (m *Member) runReleaseHooks(ctx context.Context, pairs []string) {
	if m.releaseHook == nil || len(pairs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.renewEvery())
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.releaseHook(ctx, p)
		}()
	}
	wg.Wait()
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

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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

// release deletes key at revision rev, the last this member knows it
// wrote. A renewal cut short (by Close, or a timeout) may have landed with
// its reply lost: if the key still holds this member's value at a later
// revision, that one is deleted. A key another member wrote is left alone.
func (m *Member) release(ctx context.Context, key string, rev uint64) error {
	err := m.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	// From the leader: a replica that lags may still show the value this
	// member wrote, and the delete would then miss again.
	last, gerr := m.leaderLast(ctx, key)
	if gerr != nil || !last.held || string(last.data) != string(m.value) {
		return nil // gone, or another's: nothing of ours to release
	}
	return m.kv.Delete(ctx, key, jetstream.LastRevision(last.seq))
}

// releaseID deletes the membership key after a failed Join.
func (m *Member) releaseID() {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.LeaseTTL)
	defer cancel()
	m.kv.Delete(ctx, relayPrefix+m.cfg.RelayID, jetstream.LastRevision(m.selfRev))
}

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/internal/jsapi"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// acquire tries to win a free pair's lease.
//
// A lost create is checked with the bucket's leader before the pair is
// taken as another's: for a key with history (a lease released or
// expired leaves a marker) nats.go's Create reads the key's last revision
// with a direct get, which any replica of the bucket may answer, and one
// that has not applied the release shows the old lease: Create then
// reports a key that exists though no one holds it. Taken for another's
// win, the pair would wait for a bucket entry that no one writes.
func (m *Member) acquire(pair string) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.renewEvery())
	defer cancel()
	key := leasePrefix + pair
	sent := time.Now()
	rev, err := m.kv.Create(ctx, key, m.value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = m.createOverMarker(ctx, key)
	}
	if err != nil {
		var held errHeld
		if errors.As(err, &held) || errors.Is(err, jetstream.ErrKeyExists) {
			// Someone else won; the watcher will say who. Until it
			// does, the guess holds for a renewal period (reconcile).
			h := holder{relay: "?", guessed: time.Now()}
			if held.relay != "" {
				h.relay, h.epoch, h.rev = held.relay, held.epoch, held.rev
			}
			m.holders[pair] = h
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

// errHeld is a lease key the bucket's leader shows held.
type errHeld struct {
	relay, epoch string
	rev          uint64
}

func (e errHeld) Error() string {
	return fmt.Sprintf("fleet: held by %q at revision %d", e.relay, e.rev)
}

// createOverMarker writes the lease over the key's last entry as the
// bucket's leader has it, when that entry is a delete, a purge or an
// expiry marker. The write is conditional on that revision, so a member
// that won meanwhile is not overwritten (ErrKeyExists).
func (m *Member) createOverMarker(ctx context.Context, key string) (uint64, error) {
	last, err := m.leaderLast(ctx, key)
	if err != nil {
		return 0, err
	}
	if last.held {
		var h holding
		_ = json.Unmarshal(last.data, &h)
		return 0, errHeld{relay: h.Relay, epoch: h.Epoch, rev: last.seq}
	}
	return m.kv.Update(ctx, key, m.value, last.seq)
}

// lastEntry is a key's last message in the bucket's stream.
type lastEntry struct {
	seq  uint64 // 0: the key has none
	held bool   // a value, not a delete, purge or expiry marker
	data []byte
}

// leaderLast reads key's last message through the stream's message get
// API, which its leader answers, never a replica or a mirror.
func (m *Member) leaderLast(ctx context.Context, key string) (lastEntry, error) {
	msg, err := jsapi.LastFor(ctx, m.nc, fmt.Sprintf(api.JSApiMsgGetT, "KV_"+m.cfg.Bucket), "$KV."+m.cfg.Bucket+"."+key)
	if err != nil {
		return lastEntry{}, fmt.Errorf("fleet: read %s from the bucket's leader: %w", key, err)
	}
	if msg == nil {
		return lastEntry{}, nil
	}
	e := lastEntry{seq: msg.Sequence, held: true, data: msg.Data}
	if len(msg.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(msg.Header)
		if err != nil {
			return lastEntry{}, fmt.Errorf("fleet: read %s from the bucket's leader: headers: %w", key, err)
		}
		// KV-Operation: DEL or PURGE; an expiry leaves a marker with a
		// reason instead.
		e.held = h.Get("KV-Operation") == "" && h.Get("Nats-Marker-Reason") == ""
	}
	return e, nil
}

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// claimID creates the membership key. A key already there is a live
// relay's, renewed every renewal period, or a dead one's (a relay that
// crashed, perhaps this one before a restart), which expires within one
// TTL. So the key is watched rather than waited out: a renewal means
// another live relay holds the ID, and the claim is refused at once
// (ErrSameID), within a renewal period rather than after a TTL and a half;
// the key's expiry or deletion frees the ID, and the claim is made again.
// A key that does neither within a TTL and a half is taken as live.
func (m *Member) claimID(ctx context.Context) error {
	key := relayPrefix + m.cfg.RelayID
	deadline := time.Now().Add(m.cfg.LeaseTTL + m.cfg.LeaseTTL/2)
	for {
		sent := time.Now()
		rev, err := m.kv.Create(ctx, key, m.value)
		if err == nil {
			m.selfRev, m.selfOK = rev, sent
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("fleet: join as %q: %w", m.cfg.RelayID, err)
		}
		live, since, err := m.heldLive(ctx, key, deadline)
		switch {
		case err != nil:
			return err
		case live && since.IsZero():
			return fmt.Errorf("%w: relayId %q is held in bucket %q by another relay, whose key neither expired nor was released within %v; give each relay of a fleet its own relayId",
				ErrSameID, m.cfg.RelayID, m.cfg.Bucket, m.cfg.LeaseTTL+m.cfg.LeaseTTL/2)
		case live:
			return fmt.Errorf("%w: another live relay holds relayId %q in bucket %q (it joined at %s and renews its key); give each relay of a fleet its own relayId",
				ErrSameID, m.cfg.RelayID, m.cfg.Bucket, since.Format(time.RFC3339))
		}
	}
}

// heldLive watches the membership key that another holds until its holder
// renews it (live, with when the holder joined), it expires or is deleted
// (not live: claim it again), or deadline passes (live, since zero).
func (m *Member) heldLive(ctx context.Context, key string, deadline time.Time) (live bool, since time.Time, err error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	w, err := m.kv.Watch(wctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return false, time.Time{}, ctx.Err()
		}
		return false, time.Time{}, fmt.Errorf("fleet: join as %q: watch the relay's key: %w", m.cfg.RelayID, err)
	}
	defer w.Stop()
	var seen uint64 // the revision the holder wrote last
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return false, time.Time{}, ctx.Err()
			}
			return true, time.Time{}, nil
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return false, time.Time{}, nil // the watch ended: try the claim again
			case e == nil:
				if seen == 0 {
					return false, time.Time{}, nil // gone since the claim failed
				}
			case e.Operation() != jetstream.KeyValuePut:
				return false, time.Time{}, nil // expired, or released
			case seen == 0:
				seen = e.Revision()
			case e.Revision() != seen:
				var h holding
				_ = json.Unmarshal(e.Value(), &h)
				return true, h.Since, nil
			}
		}
	}
}

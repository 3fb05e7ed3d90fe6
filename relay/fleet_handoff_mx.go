package relay

import (
	"slices"

	"github.com/apbridge/apbridge/bridge/mxsource"
)

// A gateway (mx) source's handoff in a fleet (fleet.handoff: true). What a
// single relay keeps in <source>.mx-state.json (mxsource.Handoff: the
// active gateway session, its item handles and the last worker sequence
// stored) the owner keeps in the pair's record of the handoff bucket
// (handoffRecord.Mx), by the rules of fleet_handoff.go: written only under
// a valid lease, with its token, conditional on the revision, and not
// after a newer owner's record is seen. The relay that wins the lease next
// starts the source with the record of an older owner: the source resumes
// the dead owner's session's event stream after its last stored event
// when the gateway advertises event-resume and still holds the session,
// and otherwise opens a new session with a refresh, the loss counted
// (mxsource.Stats.ResumeFallbacks), as a restarted single relay does.
//
// The record's own version is handoffVersion; the mx part carries
// mxsource's (mxsource.Handoff.Version), checked by the source. A relay
// that predates mx handoffs never reads an mx record: it runs its gateway
// sources without a handoff.

// fleetMxStore is the mxsource.HandoffStore of the instance of pair built
// under the lease of token.
type fleetMxStore struct {
	hs    *handoffStore
	pair  string
	token uint64
	// prev is the previous owner's handoff, read when the instance was
	// built (not in Start: a read of the bucket must not hold the
	// source's lock); nil when there is none.
	prev *mxsource.Handoff
}

// LoadHandoff implements mxsource.HandoffStore.
func (st *fleetMxStore) LoadHandoff() (*mxsource.Handoff, error) { return st.prev, nil }

// RecordHandoff implements mxsource.HandoffStore: it notes h in the pair's
// record and wakes the bucket's writer; it never blocks on the bucket. A
// record that names another session than the last one (the source's
// active session changed: a promoted standby, a new session) is written
// at once (update): the last one names a session that is gone with its
// gateway, or ended by it, and a successor that reads it falls back.
func (st *fleetMxStore) RecordHandoff(h mxsource.Handoff) error {
	st.hs.update(st.pair, st.token, func(rec *handoffRecord) {
		// h is the store's (the source does not change it after).
		rec.Mx, rec.Serving = &h, h.Endpoint
	})
	return nil
}

// mxTakeover returns the gateway handoff recorded for pair by an owner
// older than the lease of token, nil when there is none.
func (hs *handoffStore) mxTakeover(pair string, token uint64) *mxsource.Handoff {
	rec, ok := hs.previous(pair, token)
	if !ok {
		return nil
	}
	if rec.Mx == nil {
		hs.ignored(pair, "not a gateway source's", nil)
		return nil
	}
	hs.log.Info().Str("source", pair).Str("from", rec.Relay).Uint64("token", rec.Token).
		Str("session", rec.Mx.Session.ID).Uint64("lastStored", rec.Mx.LastStored).
		Msg("fleet: resuming the previous owner's gateway session")
	return rec.Mx
}

// mxHandoffOptions adds to opts, for the instance of gateway source pair
// being built under a won lease, the store of its handoff in the bucket,
// holding the previous owner's. Unchanged without fleet.handoff, and for
// the instance built before the lease was first won (never started with
// a handoff).
func (f *fleetPart) mxHandoffOptions(pair string, opts []mxsource.Option) []mxsource.Option {
	hs := f.handoffs.Load()
	token := f.buildingToken(pair)
	if hs == nil || token == 0 {
		return opts
	}
	st := &fleetMxStore{hs: hs, pair: pair, token: token, prev: hs.mxTakeover(pair, token)}
	return append(slices.Clip(opts), mxsource.WithHandoffStore(st))
}

package uaclient

import (
	"time"

	"github.com/gopcua/opcua/ua"
)

// maxOutOfServiceHold bounds how long the departing server's
// Bad_OutOfService samples are held back at a planned failover.
const maxOutOfServiceHold = 2 * time.Second

// outOfServiceHold holds the serving session's data from its first
// Bad_OutOfService sample on, while a standby is there to take over. A
// server that is stopped for maintenance turns its data
// Bad_OutOfService as it announces its departure (ServiceLevel 0 or a
// degraded level); relaying those samples would show consumers a Bad value
// for one publishing cycle before the backup's Good values, which SCADA
// systems alarm on. If the standby is promoted within the hold, the held
// Bad_OutOfService samples are dropped (the snapshot replaces them) and
// the rest go on before it, in order; if not, everything held goes on,
// in order, when the hold ends. A lost link is not held: the Pair reports
// it at once.
//
// It is pure: the Pair's loop offers it the serving session's data and
// delivers what it gives back.
type outOfServiceHold struct {
	s     *session // the session whose data is held
	notes []dataNote
	until time.Time
}

// holdFrom starts a hold of s's data at notes' first Bad_OutOfService
// sample, if there is one: it returns the notes to deliver now and the
// hold, nil when nothing is held.
func holdFrom(s *session, notes []dataNote, now time.Time) ([]dataNote, *outOfServiceHold) {
	for i, n := range notes {
		if n.dv != nil && n.dv.Status == ua.StatusBadOutOfService {
			h := &outOfServiceHold{s: s, notes: append([]dataNote(nil), notes[i:]...), until: now.Add(maxOutOfServiceHold)}
			return notes[:i], h
		}
	}
	return notes, nil
}

// add holds notes too: while a hold lasts, everything after its first
// sample waits, so that the order is kept.
func (h *outOfServiceHold) add(notes []dataNote) { h.notes = append(h.notes, notes...) }

// expired reports whether the hold has lasted its bound at now.
func (h *outOfServiceHold) expired(now time.Time) bool { return !now.Before(h.until) }

// release ends the hold and returns what goes on, in order: after a
// promotion of another session (replaced) all but the Bad_OutOfService
// samples, which the snapshot replaces, and how many of them were dropped;
// otherwise everything held.
func (h *outOfServiceHold) release(replaced bool) (keep []dataNote, dropped int) {
	if !replaced {
		return h.notes, 0
	}
	keep = make([]dataNote, 0, len(h.notes))
	for _, n := range h.notes {
		if n.dv != nil && n.dv.Status == ua.StatusBadOutOfService {
			dropped++
			continue
		}
		keep = append(keep, n)
	}
	return keep, dropped
}

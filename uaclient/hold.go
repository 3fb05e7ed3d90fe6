package uaclient

import (
	"fmt"
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
type outOfServiceHold struct {
	s     *session
	notes []dataNote
	until time.Time
}

// holdOrDeliver passes notes of the serving session s on, or holds them
// (and, while a hold lasts, everything after them).
func (p *Pair) holdOrDeliver(s *session, notes []dataNote, now time.Time) {
	if h := p.hold; h != nil && h.s == s {
		h.notes = append(h.notes, notes...)
		return
	}
	first := -1
	for i, n := range notes {
		if n.dv != nil && n.dv.Status == ua.StatusBadOutOfService {
			first = i
			break
		}
	}
	if first < 0 || !p.takeoverReady(s) {
		p.deliver(s, notes)
		return
	}
	p.deliver(s, notes[:first])
	p.hold = &outOfServiceHold{s: s, notes: append([]dataNote(nil), notes[first:]...), until: now.Add(maxOutOfServiceHold)}
}

// takeoverReady reports whether a standby could take s's place: a live
// standby session. Its level need not be Healthy yet: at a planned
// switch-over the backup raises its level as the primary lowers its own,
// and the primary's Bad_OutOfService samples can come before the backup's
// new level; if no promotion follows, the hold ends after its bound.
func (p *Pair) takeoverReady(s *session) bool {
	if p.set.Single {
		return false
	}
	o := p.sess[s.ep.Other()]
	return o != nil && o.up()
}

// releaseHold ends the hold: after a promotion of another session
// (replaced) the held Bad_OutOfService samples are dropped, otherwise all
// of them go on.
func (p *Pair) releaseHold(replaced bool, now time.Time) {
	h := p.hold
	if h == nil {
		return
	}
	p.hold = nil
	keep, dropped := h.notes, 0
	if replaced {
		keep = make([]dataNote, 0, len(h.notes))
		for _, n := range h.notes {
			if n.dv != nil && n.dv.Status == ua.StatusBadOutOfService {
				dropped++
				continue
			}
			keep = append(keep, n)
		}
	}
	p.deliver(h.s, keep)
	if dropped > 0 {
		p.log.Info().Str("member", h.s.ep.String()).Int("dropped", dropped).
			Msg(fmt.Sprintf("%d Bad_OutOfService samples of the departing %s replaced by the backup's values", dropped, h.s.ep))
	} else if !replaced {
		p.log.Info().Str("member", h.s.ep.String()).Int("released", len(h.notes)).Dur("held_ms", maxOutOfServiceHold).
			Msg("no promotion within the hold: the Bad_OutOfService samples go on")
	}
}

// holdExpired releases a hold that has lasted its bound.
func (p *Pair) holdExpired(now time.Time) {
	if h := p.hold; h != nil && !now.Before(h.until) {
		p.releaseHold(false, now)
	}
}

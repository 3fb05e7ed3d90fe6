package uaclient

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/ua"
)

// deliver hands data notifications of the serving session to the output,
// dropping those that repeat or predate the snapshot.
func (p *Pair) deliver(s *session, notes []dataNote) {
	for _, n := range notes {
		if p.items[n.handle] == nil {
			continue // removed meanwhile
		}
		if f, ok := s.fence[n.handle]; ok {
			if stale(n.dv, f) {
				continue
			}
			delete(s.fence, n.handle)
		}
		if r := s.resumed; r != nil {
			// Recovering from a blip: a server may send a sample again in
			// a new message that also sits in the message it sent into
			// the broken connection (node-opcua does), and Republish
			// brings both.
			if last := r.recent[n.handle]; last != nil && sameSample(n.dv, last) {
				continue
			}
			r.recent[n.handle] = n.dv
		}
		p.out.data(Update{Kind: UpdateData, Epoch: p.epoch, Endpoint: s.ep, Handle: n.handle, Value: n.dv, Received: n.at})
	}
}

// sameSample reports whether dv and last are the same sample: the same
// source time (known), status and value.
func sameSample(dv, last *ua.DataValue) bool {
	if dv == nil || last == nil || dv.SourceTimestamp.IsZero() || !dv.SourceTimestamp.Equal(last.SourceTimestamp) || dv.Status != last.Status {
		return false
	}
	if dv.Value == nil || last.Value == nil {
		return dv.Value == last.Value
	}
	return reflect.DeepEqual(dv.Value.Value(), last.Value.Value())
}

// stale reports whether a data change that follows a snapshot repeats or
// predates the snapshot's value f: the same sample again (the initial
// notification of an item created just before the snapshot read, or the
// queue a Hot promotion releases), or an older one.
func stale(dv, f *ua.DataValue) bool {
	if !dv.SourceTimestamp.IsZero() && !f.SourceTimestamp.IsZero() {
		if dv.SourceTimestamp.Before(f.SourceTimestamp) {
			return true
		}
		if !dv.SourceTimestamp.Equal(f.SourceTimestamp) {
			return false
		}
		if dv.Status == f.Status {
			return true
		}
		// The same tick in another status: a status change, unless the
		// server took it before it answered the snapshot's read. A Hot
		// standby's queue holds the tick's Bad_OutOfService sample from
		// before its level rose; released by the promotion, it must not
		// follow the Good value the snapshot already gave.
		return !dv.ServerTimestamp.IsZero() && !f.ServerTimestamp.IsZero() && dv.ServerTimestamp.Before(f.ServerTimestamp)
	}
	if dv.Status != f.Status {
		return false
	}
	if dv.Value == nil || f.Value == nil {
		return dv.Value == f.Value
	}
	return reflect.DeepEqual(dv.Value.Value(), f.Value.Value())
}

// dataNote is one data notification, with when its response arrived.
type dataNote struct {
	handle uint32
	dv     *ua.DataValue
	at     time.Time
}

func (p *Pair) onPublish(ev evPublish, now time.Time) {
	s := ev.s
	if s.dead() {
		return
	}
	switch ev.sub {
	case s.conn.healthSub:
		s.lastBeat = ev.at
	case s.conn.dataSub:
		s.lastData = ev.at
		if s.resumed != nil {
			s.resumed.dataSeen = true
		}
	default:
		return
	}
	sb := s.subs[ev.sub]
	if ev.statusChange {
		p.sessionLost(s, fmt.Errorf("the %s subscription ended (%v)", sb.name, ev.status))
		return
	}
	st := sb.published(ev.publishAnswer, now)
	p.handOn(s, sb, st.msgs, now)
	s.conn.ack(sb.id, st.acks...)
	p.markStored(sb, st)
	p.recoverGaps(s, now)
	p.checkRecovered(s, now)
}

// handOn passes messages of subscription sub, in sequence-number order,
// to what the subscription feeds: the ServiceLevel samples of the health
// subscription, or the data path.
func (p *Pair) handOn(s *session, sb *subscription, msgs [][]dataNote, now time.Time) {
	for _, notes := range msgs {
		if s.dead() {
			return
		}
		if sb.id == s.conn.healthSub {
			for _, n := range notes {
				if n.handle == handleServiceLevel {
					l, why := levelOf(n.dv)
					p.onLevel(s, l, why, now)
					if s.dead() {
						return
					}
				}
			}
			continue
		}
		switch {
		case s.serves():
			s.lastMsgs[0], s.lastMsgs[1] = s.lastMsgs[1], notes
			p.holdOrDeliver(s, notes, now)
		case s.promoting():
			s.promotion.buffered = append(s.promotion.buffered, notes...)
		}
	}
}

// recoverGaps asks the server again for the messages missing from a gap
// in either subscription's sequence numbers that has stayed open for the
// reorder wait.
func (p *Pair) recoverGaps(s *session, now time.Time) {
	if !s.up() {
		return
	}
	for _, id := range [...]uint32{s.conn.healthSub, s.conn.dataSub} {
		if ask := s.subs[id].due(now); ask != nil {
			// false only while the session closes: it is dead by then,
			// and its subscriptions with it.
			s.conn.republish(id, ask)
		}
	}
}

// onRepublished takes the answers to a Republish round: recovered messages
// fill their gaps, and the numbers the server could not give back are
// reported as lost, before the data that follows them, and skipped.
func (p *Pair) onRepublished(ev evRepublished, now time.Time) {
	s := ev.s
	if s.dead() {
		return
	}
	sb := s.subs[ev.sub]
	st, rc := sb.republished(ev.answers, now)
	if ev.sub == s.conn.dataSub {
		if s.resumed != nil {
			s.resumed.republished += rc.notes
		}
		p.republished += uint64(rc.notes)
	}
	s.conn.ack(sb.id, st.acks...)
	if len(rc.lost) > 0 {
		role := p.roleOf(s)
		p.emit(Event{Kind: EventNotificationsLost, At: now, Endpoint: s.ep, Role: role, Subscription: ev.sub, Missing: rc.lost, Err: rc.cause,
			Message: fmt.Sprintf("%s %s subscription %d lost notification messages %s (Republish: %v); delivery goes on after them",
				s.ep, sb.name, ev.sub, seqList(rc.lost), rc.cause)})
	}
	p.handOn(s, sb, st.msgs, now)
	p.markStored(sb, st)
	p.recoverGaps(s, now)
	p.checkRecovered(s, now)
}

// seqList renders sequence numbers, runs as ranges: "5-8, 11".
func seqList(seqs []uint32) string {
	var b strings.Builder
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqNext(seqs[j]) {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(uint64(seqs[i]), 10))
		if j > i {
			b.WriteString("-" + strconv.FormatUint(uint64(seqs[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// holdOrDeliver passes notes of the serving session s on, or holds them
// (and, while a hold lasts, everything after them) while a standby could
// take s's place: a live standby session. Its level need not be Healthy
// yet: at a planned switch-over the backup raises its level as the primary
// lowers its own, and the primary's Bad_OutOfService samples can come
// before the backup's new level; if no promotion follows, the hold ends
// after its bound.
func (p *Pair) holdOrDeliver(s *session, notes []dataNote, now time.Time) {
	if h := p.hold; h != nil && h.s == s {
		h.add(notes)
		return
	}
	if o := p.sess[s.ep.Other()]; p.single || o == nil || !o.up() {
		p.deliver(s, notes)
		return
	}
	pass, h := holdFrom(s, notes, now)
	p.deliver(s, pass)
	if h != nil {
		p.hold = h
	}
}

// releaseHold ends the hold, if there is one: after a promotion of
// another session (replaced) the held Bad_OutOfService samples are
// dropped, otherwise all of them go on.
func (p *Pair) releaseHold(replaced bool) {
	h := p.hold
	if h == nil {
		return
	}
	p.hold = nil
	keep, dropped := h.release(replaced)
	p.deliver(h.s, keep)
	if dropped > 0 {
		p.log.Info().Str("member", h.s.ep.String()).Int("dropped", dropped).
			Msg(fmt.Sprintf("%d Bad_OutOfService samples of the departing %s replaced by the backup's values", dropped, h.s.ep))
	} else if !replaced {
		p.log.Info().Str("member", h.s.ep.String()).Int("released", len(h.notes)).Dur("held_ms", maxOutOfServiceHold).
			Msg("no promotion within the hold: the Bad_OutOfService samples go on")
	}
}

// markStored queues, behind the updates of what st handed on, the wait
// for them to be stored and then their acknowledgement.
func (p *Pair) markStored(sb *subscription, st step) {
	if st.mark == 0 || p.opt.afterStore == nil {
		return
	}
	hook, to, n := p.opt.afterStore, st.mark, st.handed
	p.store.add(n)
	p.out.after(func() {
		var once atomic.Bool
		hook(func() {
			if once.Swap(true) {
				return
			}
			p.store.done(n)
			p.post(evStored{sb: sb, to: to})
		})
	})
}

// onStored acknowledges what ev says is stored, on the session that holds
// the subscription now. With none (a link being ridden out), the numbers
// are acknowledged when the next session's server lists them as still
// held (published).
func (p *Pair) onStored(ev evStored) {
	acks := ev.sb.stored(ev.to)
	if len(acks) == 0 {
		return
	}
	for _, s := range p.sess {
		if s != nil && !s.dead() && s.subs[ev.sb.id] == ev.sb {
			s.conn.ack(ev.sb.id, acks...)
			p.recordHandoff()
			return
		}
	}
}

package uaclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"
)

// defaultPublishers is how many Publish requests each session keeps
// outstanding: enough that the server always holds some when a publishing
// cycle is due while the answers to others travel, and that a burst (the
// first samples of thousands of items at a promotion) leaves in several
// responses per cycle: a server caps the notifications of one response
// (node-opcua at 1,000), and only answers a Publish request it holds. With
// two, a 10,000-item promotion on node-opcua waited five cycles for its
// samples.
const defaultPublishers = 4

// reorderWait is how long a gap in a subscription's sequence numbers may
// stay open before the missing messages are asked for again (Republish).
// The answers to the outstanding Publish requests reach the loop from
// different goroutines, so a message can arrive a moment after the one
// that followed it on the wire; the wait lets it come by itself, as it
// nearly always does within a millisecond.
const reorderWait = 200 * time.Millisecond

// dataNote is one data notification, with when its response arrived.
type dataNote struct {
	handle uint32
	dv     *ua.DataValue
	at     time.Time
}

func (c *conn) takeAcks() []*ua.SubscriptionAcknowledgement {
	c.amu.Lock()
	defer c.amu.Unlock()
	a := c.acks
	c.acks = nil
	if a == nil {
		a = []*ua.SubscriptionAcknowledgement{}
	}
	return a
}

// ack queues acknowledgements of sub's messages seqs for the next Publish
// request.
func (c *conn) ack(sub uint32, seqs ...uint32) {
	if len(seqs) == 0 {
		return
	}
	c.amu.Lock()
	for _, n := range seqs {
		c.acks = append(c.acks, &ua.SubscriptionAcknowledgement{SubscriptionID: sub, SequenceNumber: n})
	}
	c.amu.Unlock()
}

// publisher keeps one Publish request outstanding and hands every answer
// to the loop. It replaces gopcua's publish loop, whose pause and resume
// signals can arrive out of order and which blocks on an undrained
// notification channel: this one never blocks on anything but the server
// and the Pair's backlog limit. Several publishers run at once, so their
// answers reach the loop in any order; the loop puts them back into
// sequence-number order (see sequencer).
func (c *conn) publisher() {
	for {
		if c.p.out.waitRoom(c.ctx) != nil {
			return
		}
		res, err := send[*ua.PublishResponse](c.ctx, c.client, &ua.PublishRequest{SubscriptionAcknowledgements: c.takeAcks()})
		at := time.Now()
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.p.post(evSessionErr{s: c.s, err: fmt.Errorf("publish: %w", err)})
			return
		}
		ev := evPublish{s: c.s, sub: res.SubscriptionID, at: at, published: published{keepAlive: true, avail: res.AvailableSequenceNumbers}}
		if nm := res.NotificationMessage; nm != nil {
			ev.seq = nm.SequenceNumber
			ev.keepAlive = len(nm.NotificationData) == 0
			if drop := c.p.opt.dropMessage; drop != nil && !ev.keepAlive && res.SubscriptionID == c.dataSub && drop(ev.seq) {
				continue
			}
			// Data messages are acknowledged by the loop once it has
			// handed them on: a message acknowledged on arrival would be
			// gone from the server's retransmission queue if the session
			// died before the loop took it.
			ev.notes, ev.status, ev.statusChange = notesOf(nm, at)
			if res.SubscriptionID == c.dataSub {
				c.first.add(ev.notes)
			}
		}
		if !c.p.post(ev) {
			return
		}
	}
}

// notesOf returns the data notifications of nm, received at at, and the
// status of a StatusChangeNotification in it.
func notesOf(nm *ua.NotificationMessage, at time.Time) (notes []dataNote, status ua.StatusCode, statusChange bool) {
	for _, eo := range nm.NotificationData {
		if eo == nil {
			continue
		}
		switch v := eo.Value.(type) {
		case *ua.DataChangeNotification:
			for _, n := range v.MonitoredItems {
				if n != nil && n.Value != nil {
					notes = append(notes, dataNote{handle: n.ClientHandle, dv: n.Value, at: at})
				}
			}
		case *ua.StatusChangeNotification:
			status, statusChange = v.Status, true
		}
	}
	return notes, status, statusChange
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
	st := sb.published(ev.published, now)
	p.handOn(s, sb, st.msgs, now)
	s.conn.ack(sb.id, st.acks...)
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

// republish asks the server for messages seqs of subscription sub again,
// one Republish request at a time, each within the read timeout, and posts
// the answers as one event. After a failure other than
// Bad_MessageNotAvailable (a timeout, a server without Republish) the
// rest are not asked for: they fail the same way. It returns false if the
// session is closing.
func (c *conn) republish(sub uint32, seqs []uint32) bool {
	if !c.acquire() {
		return false
	}
	timeout := c.p.set.ReadTimeout
	go func() {
		defer c.release()
		ev := evRepublished{s: c.s, sub: sub, answers: make([]republished, 0, len(seqs))}
		var stop error
		for _, seq := range seqs {
			a := republished{seq: seq, err: stop}
			if stop == nil {
				ctx, cancel := context.WithTimeout(c.ctx, timeout)
				res, err := send[*ua.RepublishResponse](ctx, c.client, &ua.RepublishRequest{SubscriptionID: sub, RetransmitSequenceNumber: seq})
				cancel()
				switch {
				case err != nil:
					a.err = err
					if !errors.Is(err, ua.StatusBadMessageNotAvailable) {
						stop = err
					}
				case res.NotificationMessage == nil || res.NotificationMessage.SequenceNumber != seq:
					a.err = fmt.Errorf("the server answered with another message")
				default:
					a.notes, _, _ = notesOf(res.NotificationMessage, time.Now())
					a.ok = true
				}
			}
			ev.answers = append(ev.answers, a)
		}
		c.p.post(ev)
	}()
	return true
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
	if o := p.sess[s.ep.Other()]; p.set.Single || o == nil || !o.up() {
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

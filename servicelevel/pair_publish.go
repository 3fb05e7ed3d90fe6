package servicelevel

import (
	"fmt"
	"time"

	"github.com/gopcua/opcua/ua"
)

// publishers is how many Publish requests each session keeps outstanding:
// two, so that the server always holds one when a publishing cycle is due
// while the answer to the other travels.
const publishers = 2

// dataNote is one data notification, with when its response arrived.
type dataNote struct {
	handle uint32
	dv     *ua.DataValue
	at     time.Time
}

func (s *session) takeAcks() []*ua.SubscriptionAcknowledgement {
	s.amu.Lock()
	defer s.amu.Unlock()
	a := s.acks
	s.acks = nil
	if a == nil {
		a = []*ua.SubscriptionAcknowledgement{}
	}
	return a
}

func (s *session) ack(sub, seq uint32) {
	s.amu.Lock()
	s.acks = append(s.acks, &ua.SubscriptionAcknowledgement{SubscriptionID: sub, SequenceNumber: seq})
	s.amu.Unlock()
}

// publisher keeps one Publish request outstanding and hands every answer
// to the loop. It replaces gopcua's publish loop, whose pause and resume
// signals can arrive out of order and which blocks on an undrained
// notification channel: this one never blocks on anything but the server
// and the Pair's backlog limit.
func (s *session) publisher() {
	for {
		if s.p.out.waitRoom(s.ctx) != nil {
			return
		}
		res, err := send[*ua.PublishResponse](s.ctx, s.c, &ua.PublishRequest{SubscriptionAcknowledgements: s.takeAcks()})
		at := time.Now()
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			s.p.post(evSessionErr{s: s, err: fmt.Errorf("publish: %w", err)})
			return
		}
		ev := evPublish{s: s, sub: res.SubscriptionID, at: at}
		if nm := res.NotificationMessage; nm != nil {
			if len(nm.NotificationData) > 0 {
				s.ack(res.SubscriptionID, nm.SequenceNumber)
			}
			for _, eo := range nm.NotificationData {
				if eo == nil {
					continue
				}
				switch v := eo.Value.(type) {
				case *ua.DataChangeNotification:
					for _, n := range v.MonitoredItems {
						if n != nil && n.Value != nil {
							ev.notes = append(ev.notes, dataNote{handle: n.ClientHandle, dv: n.Value, at: at})
						}
					}
				case *ua.StatusChangeNotification:
					ev.status = v.Status
					ev.statusChange = true
				}
			}
		}
		if !s.p.post(ev) {
			return
		}
	}
}

func (p *Pair) onPublish(ev evPublish, now time.Time) {
	s := ev.s
	if s.dead {
		return
	}
	switch ev.sub {
	case s.healthSub:
		s.lastBeat = ev.at
		if ev.statusChange {
			p.sessionLost(s, fmt.Errorf("the health subscription ended (%v)", ev.status))
			return
		}
		for _, n := range ev.notes {
			if n.handle == handleServiceLevel {
				l, why := levelOf(n.dv)
				p.onLevel(s, l, why, now)
				if s.dead {
					return
				}
			}
		}
	case s.dataSub:
		s.lastData = ev.at
		if ev.statusChange {
			p.sessionLost(s, fmt.Errorf("the data subscription ended (%v)", ev.status))
			return
		}
		switch {
		case s.serving:
			p.deliver(s, ev.notes)
		case s.activating:
			s.buffered = append(s.buffered, ev.notes...)
		}
	}
}

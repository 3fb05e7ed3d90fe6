package uaclient

import (
	"context"
	"errors"
	"fmt"
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
		if c.p.out.waitRoom(c.ctx) != nil || c.p.store.waitRoom(c.ctx) != nil {
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
		ev := evPublish{s: c.s, sub: res.SubscriptionID, at: at, publishAnswer: publishAnswer{keepAlive: true, avail: res.AvailableSequenceNumbers}}
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

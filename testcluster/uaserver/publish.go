package uaserver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gopcua/opcua/ua"
)

// pubReq is a queued Publish request.
type pubReq struct {
	conn     *uaConn
	reqID    uint32
	req      *ua.PublishRequest
	results  []ua.StatusCode // acknowledgement results
	deadline time.Time       // zero: no timeout hint
}

// pubOut is a PublishResponse to send after the engine lock is released.
type pubOut struct {
	conn  *uaConn
	reqID uint32
	resp  *ua.PublishResponse
}

func publishFault(req ua.Request, code ua.StatusCode, results []ua.StatusCode) *ua.PublishResponse {
	if results == nil {
		results = []ua.StatusCode{}
	}
	return &ua.PublishResponse{
		ResponseHeader:           respHeader(req, code),
		AvailableSequenceNumbers: []uint32{},
		NotificationMessage:      &ua.NotificationMessage{NotificationData: []*ua.ExtensionObject{}},
		Results:                  results,
		DiagnosticInfos:          []*ua.DiagnosticInfo{},
	}
}

// statusChangeLocked is a PublishResponse carrying a subscription's status
// change.
func statusChangeLocked(sub *uaSub, pr *pubReq, status ua.StatusCode, now time.Time) pubOut {
	sub.seq = nextSeq(sub.seq)
	return pubOut{conn: pr.conn, reqID: pr.reqID, resp: &ua.PublishResponse{
		ResponseHeader:           respHeader(pr.req, ua.StatusOK),
		SubscriptionID:           sub.id,
		AvailableSequenceNumbers: []uint32{},
		NotificationMessage: &ua.NotificationMessage{
			SequenceNumber: sub.seq,
			PublishTime:    now,
			NotificationData: []*ua.ExtensionObject{
				ua.NewExtensionObject(&ua.StatusChangeNotification{Status: status, DiagnosticInfo: &ua.DiagnosticInfo{}}),
			},
		},
		Results:         pr.results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}}
}

// publish queues a Publish request for the session's subscriptions.
func (e *uaEngine) publish(c *uaConn, reqID uint32, r *ua.PublishRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.sessionLocked(r.RequestHeader)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	results := make([]ua.StatusCode, len(r.SubscriptionAcknowledgements))
	for i, a := range r.SubscriptionAcknowledgements {
		var sub *uaSub
		if a != nil {
			sub = sess.subs[a.SubscriptionID]
		}
		if sub == nil {
			results[i] = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		if e.s.pair.cfg.retransmit > 0 {
			results[i] = ackLocked(sub, a.SequenceNumber)
		}
	}
	switch {
	case len(sess.subs) == 0:
		return publishFault(r, ua.StatusBadNoSubscription, results)
	case len(sess.pubq) >= maxPublishQueue:
		return publishFault(r, ua.StatusBadTooManyPublishRequests, results)
	}
	pr := &pubReq{conn: c, reqID: reqID, req: r, results: results}
	if h := r.RequestHeader.TimeoutHint; h > 0 {
		pr.deadline = time.Now().Add(time.Duration(h) * time.Millisecond)
	}
	sess.pubq = append(sess.pubq, pr)
	for _, sub := range sess.subs {
		if sub.late {
			wakeUp(sub)
		}
	}
	return nil
}

// pruneLocked drops Publish requests the client has given up on. They are
// dropped silently: a late Bad_Timeout would make gopcua's client tear the
// channel down, and using one for data would lose that data.
func pruneLocked(sess *uaSession, now time.Time) {
	out := sess.pubq[:0]
	for _, pr := range sess.pubq {
		if pr.deadline.IsZero() || now.Before(pr.deadline) {
			out = append(out, pr)
		}
	}
	clear(sess.pubq[len(out):])
	sess.pubq = out
}

func popLocked(sess *uaSession) *pubReq {
	pr := sess.pubq[0]
	sess.pubq[0] = nil
	sess.pubq = sess.pubq[1:]
	return pr
}

// run is a subscription's publishing loop.
func (e *uaEngine) run(sub *uaSub, interval time.Duration) {
	defer e.wg.Done()
	defer close(sub.exited)
	defer func() {
		if v := recover(); v != nil {
			e.s.log.Error().Interface("panic", v).Uint32("subscription", sub.id).Msg("uaserver: subscription panicked; deleting it")
			e.mu.Lock()
			e.deleteSubLocked(sub)
			e.mu.Unlock()
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var flushed chan struct{}
		tick := false
		select {
		case <-sub.done:
			return
		case <-t.C:
			tick = true
		case <-sub.wake:
		case flushed = <-sub.flush:
		}
		out, expired, newInterval := e.cycle(sub, tick, flushed != nil)
		if newInterval > 0 {
			t.Reset(newInterval)
		}
		e.send(out)
		if flushed != nil {
			close(flushed)
		}
		if expired {
			e.s.log.Debug().Uint32("subscription", sub.id).Msg("uaserver: subscription lifetime expired")
			e.mu.Lock()
			e.deleteSubLocked(sub)
			e.mu.Unlock()
			return
		}
	}
}

// cycle decides, under the lock, what a subscription sends now.
func (e *uaEngine) cycle(sub *uaSub, tick, flush bool) (out []pubOut, expired bool, newInterval time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sub.deleted {
		return nil, false, 0
	}
	if sub.intervalChanged {
		sub.intervalChanged = false
		newInterval = sub.interval
	}
	now := time.Now()
	sess := sub.sess
	pruneLocked(sess, now)
	if tick {
		if len(sess.pubq) == 0 {
			sub.lifetimeCtr++
			if sub.lifetimeCtr > sub.lifetime {
				return nil, true, newInterval
			}
		} else {
			sub.lifetimeCtr = 0
		}
	} else if !sub.late && !flush {
		// Woken between ticks with nothing overdue: wait for the interval.
		return nil, false, newInterval
	}
	// Requests a late subscription of higher priority waits for are not
	// this one's to take.
	reserved := outrankingLateLocked(sub)
	if sub.publishing && sub.reportable() {
		for len(sess.pubq) > reserved && len(out) < maxResponsesPerCycle {
			out = append(out, e.dataMessageLocked(sub, popLocked(sess), now))
			if !sub.reportable() {
				break
			}
		}
		sub.keepAliveCtr = 0
		sub.late = sub.reportable()
		return out, false, newInterval
	}
	if tick {
		sub.keepAliveCtr++
	}
	sub.late = false
	if sub.keepAliveCtr >= sub.keepAlive {
		if len(sess.pubq) <= reserved {
			sub.late = true
		} else {
			out = append(out, e.keepAliveLocked(sub, popLocked(sess), now))
			sub.keepAliveCtr = 0
		}
	}
	return out, false, newInterval
}

// outrankingLateLocked counts the subscriptions of sub's session with a
// higher priority that are late: they have something to send and wait for
// a Publish request. The session's next requests are theirs (Part 4: the
// server de-queues a Publish request to the subscription with the highest
// priority), so a burst of data changes cannot hold back a ServiceLevel
// change on a subscription the client ranked above it.
func outrankingLateLocked(sub *uaSub) int {
	n := 0
	for _, o := range sub.sess.subs {
		if o != sub && o.late && o.priority > sub.priority {
			n++
		}
	}
	return n
}

// reportable reports whether a Reporting item has a queued value.
func (sub *uaSub) reportable() bool {
	for _, it := range sub.order {
		if it.mode == ua.MonitoringModeReporting && len(it.queue) > 0 {
			return true
		}
	}
	return false
}

func nextSeq(seq uint32) uint32 {
	if seq == math.MaxUint32 {
		return 1 // sequence numbers skip 0 when they wrap
	}
	return seq + 1
}

// dataMessageLocked takes the queued values that fit one response.
func (e *uaEngine) dataMessageLocked(sub *uaSub, pr *pubReq, now time.Time) pubOut {
	// The response also lists the retransmission queue, this message
	// included.
	budget := pr.conn.maxBody - publishEnvelopeReserve - 4*len(pr.results) - 4*(len(sub.sent)+1)
	var notifs []*ua.MonitoredItemNotification
	size := 0
full:
	for _, it := range sub.order {
		if it.mode != ua.MonitoringModeReporting {
			continue
		}
		for len(it.queue) > 0 {
			q := it.queue[0]
			if len(notifs) > 0 && (size+q.size > budget || (sub.maxNotifs > 0 && uint32(len(notifs)) >= sub.maxNotifs)) {
				break full
			}
			notifs = append(notifs, &ua.MonitoredItemNotification{ClientHandle: it.handle, Value: q.dv})
			size += q.size
			it.queue[0] = queuedValue{}
			it.queue = it.queue[1:]
		}
	}
	sub.seq = nextSeq(sub.seq)
	e.notifications.Add(uint64(len(notifs)))
	dcn := &ua.DataChangeNotification{MonitoredItems: notifs, DiagnosticInfos: []*ua.DiagnosticInfo{}}
	nm := &ua.NotificationMessage{
		SequenceNumber:   sub.seq,
		PublishTime:      now,
		NotificationData: []*ua.ExtensionObject{ua.NewExtensionObject(dcn)},
	}
	// Kept before it is sent: if the channel breaks under it, the client
	// asks for it again on its next channel.
	e.keepSentLocked(sub, nm)
	return pubOut{conn: pr.conn, reqID: pr.reqID, resp: &ua.PublishResponse{
		ResponseHeader:           respHeader(pr.req, ua.StatusOK),
		SubscriptionID:           sub.id,
		AvailableSequenceNumbers: sub.available(),
		MoreNotifications:        sub.reportable(),
		NotificationMessage:      nm,
		Results:                  pr.results,
		DiagnosticInfos:          []*ua.DiagnosticInfo{},
	}}
}

func (e *uaEngine) keepAliveLocked(sub *uaSub, pr *pubReq, now time.Time) pubOut {
	e.keepAlives.Add(1)
	return pubOut{conn: pr.conn, reqID: pr.reqID, resp: &ua.PublishResponse{
		ResponseHeader:           respHeader(pr.req, ua.StatusOK),
		SubscriptionID:           sub.id,
		AvailableSequenceNumbers: sub.available(),
		// A keep-alive carries the sequence number the next data message
		// will have, and does not use it up.
		NotificationMessage: &ua.NotificationMessage{
			SequenceNumber:   nextSeq(sub.seq),
			PublishTime:      now,
			NotificationData: []*ua.ExtensionObject{},
		},
		Results:         pr.results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}}
}

// send writes PublishResponses. It runs without the engine lock: a write
// can block for as long as the client's link is frozen.
func (e *uaEngine) send(out []pubOut) {
	for _, o := range out {
		if err := e.sendOne(o); err != nil {
			e.sendErrors.Add(1)
			// The connection is broken: closing it ends its goroutine,
			// which forgets its queued Publish requests.
			o.conn.close()
			continue
		}
		e.publishes.Add(1)
	}
}

func (e *uaEngine) sendOne(o pubOut) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic sending a PublishResponse: %v", v)
			e.s.log.Error().Err(err).Msg("uaserver")
		}
	}()
	return o.conn.sc.SendResponseWithContext(context.Background(), o.reqID, o.resp)
}

// flush asks every subscription to publish what is queued now, and waits
// until each has tried or ctx ends. A graceful stop flushes so that its
// ServiceLevel 0 is on the wire before the connections close.
func (e *uaEngine) flush(ctx context.Context) {
	e.mu.Lock()
	subs := make([]*uaSub, 0, len(e.subs))
	for _, sub := range e.subs {
		subs = append(subs, sub)
	}
	e.mu.Unlock()
	type pending struct {
		sub *uaSub
		ch  chan struct{}
	}
	var waits []pending
	for _, sub := range subs {
		ch := make(chan struct{})
		select {
		case sub.flush <- ch:
			waits = append(waits, pending{sub, ch})
		case <-sub.done:
		case <-ctx.Done():
			return
		}
	}
	for _, w := range waits {
		select {
		case <-w.ch:
		case <-w.sub.exited:
		case <-ctx.Done():
			return
		}
	}
}

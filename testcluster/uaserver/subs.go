package uaserver

import (
	"math"
	"time"

	"github.com/gopcua/opcua/ua"
)

// uaSub is a subscription. The engine lock guards its state; run, in
// opcua_publish.go, is its publishing goroutine.
type uaSub struct {
	id              uint32
	sess            *uaSession
	interval        time.Duration
	intervalChanged bool
	lifetime        uint32
	keepAlive       uint32
	maxNotifs       uint32
	priority        byte // the client's; a higher one is answered first
	publishing      bool
	items           map[uint32]*uaItem
	order           []*uaItem
	seq             uint32
	keepAliveCtr    uint32
	lifetimeCtr     uint32
	late            bool // something was due and no Publish request was queued
	deleted         bool
	// sent are the data messages sent and not yet acknowledged, oldest
	// first, at most the server's retransmit queue.
	sent []*ua.NotificationMessage

	wake   chan struct{}      // a Publish request arrived or parameters changed
	flush  chan chan struct{} // publish what is queued now (graceful stop)
	done   chan struct{}      // closed when the subscription is deleted
	exited chan struct{}      // closed when its goroutine has returned
}

func wakeUp(sub *uaSub) {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

// reviseInterval turns a requested publishing interval into the one the
// server uses.
func (e *uaEngine) reviseInterval(ms float64) time.Duration {
	lo := e.s.pair.cfg.minPublish
	// Part 4: 0 or negative means "as fast as the server can". gopcua's
	// server passed 0 to time.NewTicker and panicked.
	if math.IsNaN(ms) || ms <= 0 {
		return lo
	}
	if ms >= float64(maxPublishingInterval/time.Millisecond) {
		return maxPublishingInterval
	}
	return max(time.Duration(ms*float64(time.Millisecond)), lo)
}

// reviseCounts revises the keep-alive and lifetime counts: keep-alives at
// least every maxKeepAlivePeriod, a lifetime of at least three keep-alive
// periods (Part 4) and at most maxSubscriptionLife.
func reviseCounts(interval time.Duration, lifetime, keepAlive uint32) (uint32, uint32) {
	ka := keepAlive
	if ka == 0 {
		ka = defaultKeepAliveCount
	}
	ka = min(ka, max(1, uint32(maxKeepAlivePeriod/interval)))
	lt := max(lifetime, 3*ka)
	lt = min(lt, max(3*ka, uint32(maxSubscriptionLife/interval)))
	return lt, ka
}

func (e *uaEngine) createSubscription(r *ua.CreateSubscriptionRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.sessionLocked(r.RequestHeader)
	switch {
	case code != ua.StatusOK:
		return serviceFault(r, code)
	case e.closed:
		return serviceFault(r, ua.StatusBadServerHalted)
	case len(sess.subs) >= maxSubsPerSession:
		return serviceFault(r, ua.StatusBadTooManySubscriptions)
	}
	interval := e.reviseInterval(r.RequestedPublishingInterval)
	lt, ka := reviseCounts(interval, r.RequestedLifetimeCount, r.RequestedMaxKeepAliveCount)
	e.nextSub++
	sub := &uaSub{
		id:         e.nextSub,
		sess:       sess,
		interval:   interval,
		lifetime:   lt,
		keepAlive:  ka,
		maxNotifs:  r.MaxNotificationsPerPublish,
		priority:   r.Priority,
		publishing: r.PublishingEnabled,
		items:      make(map[uint32]*uaItem),
		// A full counter makes the first idle cycle send a keep-alive, so
		// the client learns at once that the subscription works.
		keepAliveCtr: ka,
		wake:         make(chan struct{}, 1),
		flush:        make(chan chan struct{}),
		done:         make(chan struct{}),
		exited:       make(chan struct{}),
	}
	e.subs[sub.id] = sub
	sess.subs[sub.id] = sub
	e.wg.Add(1)
	go e.run(sub, interval)
	return &ua.CreateSubscriptionResponse{
		ResponseHeader:            respHeader(r, ua.StatusOK),
		SubscriptionID:            sub.id,
		RevisedPublishingInterval: float64(interval) / float64(time.Millisecond),
		RevisedLifetimeCount:      lt,
		RevisedMaxKeepAliveCount:  ka,
	}
}

func (e *uaEngine) modifySubscription(r *ua.ModifySubscriptionRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.sessionLocked(r.RequestHeader)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	sub := sess.subs[r.SubscriptionID]
	if sub == nil {
		return serviceFault(r, ua.StatusBadSubscriptionIDInvalid)
	}
	interval := e.reviseInterval(r.RequestedPublishingInterval)
	lt, ka := reviseCounts(interval, r.RequestedLifetimeCount, r.RequestedMaxKeepAliveCount)
	if interval != sub.interval {
		sub.interval, sub.intervalChanged = interval, true
		wakeUp(sub)
	}
	sub.lifetime, sub.keepAlive = lt, ka
	sub.maxNotifs = r.MaxNotificationsPerPublish
	sub.priority = r.Priority
	return &ua.ModifySubscriptionResponse{
		ResponseHeader:            respHeader(r, ua.StatusOK),
		RevisedPublishingInterval: float64(interval) / float64(time.Millisecond),
		RevisedLifetimeCount:      lt,
		RevisedMaxKeepAliveCount:  ka,
	}
}

func (e *uaEngine) setPublishingMode(c *uaConn, r *ua.SetPublishingModeRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.batchLocked(c, r.RequestHeader, len(r.SubscriptionIDs), 4)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	results := make([]ua.StatusCode, len(r.SubscriptionIDs))
	for i, id := range r.SubscriptionIDs {
		sub := sess.subs[id]
		if sub == nil {
			results[i] = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		sub.publishing = r.PublishingEnabled
	}
	return &ua.SetPublishingModeResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

func (e *uaEngine) deleteSubscriptions(c *uaConn, r *ua.DeleteSubscriptionsRequest) ua.Response {
	resp, orphans := e.deleteSubs(c, r)
	// Publish requests that no subscription will ever answer get
	// Bad_NoSubscription, which gopcua's client takes as "pause the publish
	// loop" rather than as a broken channel. They are sent after the lock
	// is released.
	e.send(noSubscription(orphans))
	return resp
}

func (e *uaEngine) deleteSubs(c *uaConn, r *ua.DeleteSubscriptionsRequest) (ua.Response, []*pubReq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.batchLocked(c, r.RequestHeader, len(r.SubscriptionIDs), 4)
	if code != ua.StatusOK {
		return serviceFault(r, code), nil
	}
	results := make([]ua.StatusCode, len(r.SubscriptionIDs))
	for i, id := range r.SubscriptionIDs {
		sub := sess.subs[id]
		if sub == nil {
			results[i] = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		e.deleteSubLocked(sub)
	}
	var orphans []*pubReq
	if len(sess.subs) == 0 {
		orphans, sess.pubq = sess.pubq, nil
	}
	return &ua.DeleteSubscriptionsResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, orphans
}

func noSubscription(q []*pubReq) []pubOut {
	out := make([]pubOut, 0, len(q))
	for _, pr := range q {
		out = append(out, pubOut{conn: pr.conn, reqID: pr.reqID, resp: publishFault(pr.req, ua.StatusBadNoSubscription, pr.results)})
	}
	return out
}

func (e *uaEngine) deleteSubLocked(sub *uaSub) {
	if sub.deleted {
		return
	}
	sub.deleted = true
	delete(e.subs, sub.id)
	delete(sub.sess.subs, sub.id)
	for _, it := range sub.order {
		e.unindexLocked(it)
	}
	close(sub.done)
}

func (e *uaEngine) republish(r *ua.RepublishRequest) ua.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.sessionLocked(r.RequestHeader)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	sub := sess.subs[r.SubscriptionID]
	if sub == nil {
		return serviceFault(r, ua.StatusBadSubscriptionIDInvalid)
	}
	for _, nm := range sub.sent {
		if nm.SequenceNumber == r.RetransmitSequenceNumber {
			return &ua.RepublishResponse{ResponseHeader: respHeader(r, ua.StatusOK), NotificationMessage: nm}
		}
	}
	return serviceFault(r, ua.StatusBadMessageNotAvailable)
}

// keepSentLocked keeps nm, a data message just sent, for Republish.
func (e *uaEngine) keepSentLocked(sub *uaSub, nm *ua.NotificationMessage) {
	limit := e.s.pair.cfg.retransmit
	if limit == 0 {
		return
	}
	if len(sub.sent) >= limit {
		sub.sent[0] = nil
		sub.sent = sub.sent[1:]
	}
	sub.sent = append(sub.sent, nm)
}

// ackLocked drops message seq of sub from the retransmission queue: Good,
// or Bad_SequenceNumberUnknown if it is not there.
func ackLocked(sub *uaSub, seq uint32) ua.StatusCode {
	for i, nm := range sub.sent {
		if nm.SequenceNumber == seq {
			sub.sent = append(sub.sent[:i], sub.sent[i+1:]...)
			return ua.StatusOK
		}
	}
	return ua.StatusBadSequenceNumberUnknown
}

// available lists the sequence numbers sub holds for Republish.
func (sub *uaSub) available() []uint32 {
	seqs := make([]uint32, len(sub.sent))
	for i, nm := range sub.sent {
		seqs[i] = nm.SequenceNumber
	}
	return seqs
}

func (e *uaEngine) transferSubscriptions(c *uaConn, r *ua.TransferSubscriptionsRequest) ua.Response {
	resp, out := e.transfer(c, r)
	e.send(out)
	return resp
}

// transfer moves subscriptions to the calling session. Part 4: the old
// session is told with a Good_SubscriptionTransferred status change (if it
// has a Publish request queued), and if it has no subscription left, its
// other Publish requests get Bad_NoSubscription instead of waiting for
// ever.
func (e *uaEngine) transfer(c *uaConn, r *ua.TransferSubscriptionsRequest) (ua.Response, []pubOut) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess, code := e.batchLocked(c, r.RequestHeader, len(r.SubscriptionIDs), 16)
	if code != ua.StatusOK {
		return serviceFault(r, code), nil
	}
	now := time.Now()
	var out []pubOut
	results := make([]*ua.TransferResult, len(r.SubscriptionIDs))
	for i, id := range r.SubscriptionIDs {
		results[i] = &ua.TransferResult{AvailableSequenceNumbers: []uint32{}}
		sub := e.subs[id]
		if sub == nil {
			results[i].StatusCode = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		results[i].AvailableSequenceNumbers = sub.available()
		if old := sub.sess; old != sess {
			delete(old.subs, id)
			sub.sess = sess
			sess.subs[id] = sub
			pruneLocked(old, now)
			if len(old.pubq) > 0 {
				out = append(out, statusChangeLocked(sub, popLocked(old), ua.StatusGoodSubscriptionTransferred, now))
			}
			if len(old.subs) == 0 {
				out = append(out, noSubscription(old.pubq)...)
				old.pubq = nil
			}
		}
		if r.SendInitialValues {
			for _, it := range sub.order {
				if it.mode != ua.MonitoringModeDisabled {
					e.offerLocked(it, it.node.read(it.attr, it.ts, now), true)
				}
			}
		}
	}
	return &ua.TransferSubscriptionsResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, out
}

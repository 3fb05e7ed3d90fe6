package testcluster

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Subscription limits. Requests beyond them get per-operation Bad results
// or revised parameters, never a panic.
const (
	maxSubsPerSession      = 64
	maxItemsPerSub         = 50000
	maxQueueSize           = 256
	maxPublishQueue        = 64
	maxResponsesPerCycle   = 16
	maxPublishingInterval  = 10 * time.Minute
	maxKeepAlivePeriod     = 5 * time.Minute
	maxSubscriptionLife    = time.Hour
	defaultKeepAliveCount  = 10
	publishEnvelopeReserve = 256
)

// uaEngine holds a server's sessions, subscriptions and monitored items.
//
// It replaces gopcua's SubscriptionService and MonitoredItemService, whose
// traps it avoids by construction:
//   - Notifications are queued under mu and never sent under it: each
//     subscription's goroutine takes what is due under the lock and writes
//     to the network after releasing it, so a producer never blocks on a
//     subscription that has died or stalled (gopcua's ChangeNotification
//     blocks on a full channel while holding the monitored-item mutex).
//   - Each monitored item has a queue of the size the client asked for (up
//     to maxQueueSize), not a fixed size of 1.
//   - Subscription and item ids come from counters that never repeat
//     (gopcua derives them from the map size, so they collide after a
//     delete).
//   - Publishing intervals of 0, negative or NaN are revised to the
//     minimum (gopcua passed 0 to time.NewTicker and panicked).
//   - Unknown subscriptions, items and sessions get Bad results (gopcua
//     dereferenced nil items in SetMonitoringMode and DeleteMonitoredItems).
//   - A data change that does not fit one 64 KiB chunk is split over
//     several PublishResponses with MoreNotifications set.
//   - ModifySubscription, SetPublishingMode, SetMonitoringMode (Sampling
//     queues without reporting), ModifyMonitoredItems and
//     TransferSubscriptions (with the status change to the old session)
//     are implemented; Republish answers Bad_MessageNotAvailable because
//     there is no retransmission queue.
//
// Sessions are in opcua_sessions.go, monitored items and sampling in
// opcua_items.go.
type uaEngine struct {
	s *OPCUAServer

	mu       sync.Mutex
	closed   bool
	sessions map[string]*uaSession
	subs     map[uint32]*uaSub
	byNode   map[*uaNode]map[*uaItem]struct{}
	nextSub  uint32
	nextItem uint32

	wg sync.WaitGroup // subscription goroutines

	notifications atomic.Uint64
	publishes     atomic.Uint64
	keepAlives    atomic.Uint64
	sendErrors    atomic.Uint64
	overflows     atomic.Uint64
}

func newUAEngine(s *OPCUAServer) *uaEngine {
	return &uaEngine{
		s:        s,
		sessions: make(map[string]*uaSession),
		subs:     make(map[uint32]*uaSub),
		byNode:   make(map[*uaNode]map[*uaItem]struct{}),
	}
}

// pubReq is a queued Publish request.
type pubReq struct {
	conn     *uaConn
	reqID    uint32
	req      *ua.PublishRequest
	results  []ua.StatusCode // acknowledgement results
	deadline time.Time       // zero: no timeout hint
}

type uaSub struct {
	id              uint32
	sess            *uaSession
	interval        time.Duration
	intervalChanged bool
	lifetime        uint32
	keepAlive       uint32
	maxNotifs       uint32
	publishing      bool
	items           map[uint32]*uaItem
	order           []*uaItem
	seq             uint32
	keepAliveCtr    uint32
	lifetimeCtr     uint32
	late            bool // something was due and no Publish request was queued
	deleted         bool

	wake   chan struct{}      // a Publish request arrived or parameters changed
	flush  chan chan struct{} // publish what is queued now (graceful stop)
	done   chan struct{}      // closed when the subscription is deleted
	exited chan struct{}      // closed when its goroutine has returned
}

// pubOut is a PublishResponse to send after the engine lock is released.
type pubOut struct {
	conn  *uaConn
	reqID uint32
	resp  *ua.PublishResponse
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
	if sess.subs[r.SubscriptionID] == nil {
		return serviceFault(r, ua.StatusBadSubscriptionIDInvalid)
	}
	return serviceFault(r, ua.StatusBadMessageNotAvailable)
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
		// Nothing is kept for retransmission, so every known
		// subscription's acknowledgement is simply accepted.
		if a == nil || sess.subs[a.SubscriptionID] == nil {
			results[i] = ua.StatusBadSubscriptionIDInvalid
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
			e.s.log.Error().Interface("panic", v).Uint32("subscription", sub.id).Msg("testcluster: opcua subscription panicked; deleting it")
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
			e.s.log.Debug().Uint32("subscription", sub.id).Msg("testcluster: opcua subscription lifetime expired")
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
	if sub.publishing && sub.reportable() {
		for len(sess.pubq) > 0 && len(out) < maxResponsesPerCycle {
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
		if len(sess.pubq) == 0 {
			sub.late = true
		} else {
			out = append(out, e.keepAliveLocked(sub, popLocked(sess), now))
			sub.keepAliveCtr = 0
		}
	}
	return out, false, newInterval
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
	budget := pr.conn.maxBody - publishEnvelopeReserve - 4*len(pr.results)
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
	return pubOut{conn: pr.conn, reqID: pr.reqID, resp: &ua.PublishResponse{
		ResponseHeader:           respHeader(pr.req, ua.StatusOK),
		SubscriptionID:           sub.id,
		AvailableSequenceNumbers: []uint32{},
		MoreNotifications:        sub.reportable(),
		NotificationMessage: &ua.NotificationMessage{
			SequenceNumber:   sub.seq,
			PublishTime:      now,
			NotificationData: []*ua.ExtensionObject{ua.NewExtensionObject(dcn)},
		},
		Results:         pr.results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}}
}

func (e *uaEngine) keepAliveLocked(sub *uaSub, pr *pubReq, now time.Time) pubOut {
	e.keepAlives.Add(1)
	return pubOut{conn: pr.conn, reqID: pr.reqID, resp: &ua.PublishResponse{
		ResponseHeader:           respHeader(pr.req, ua.StatusOK),
		SubscriptionID:           sub.id,
		AvailableSequenceNumbers: []uint32{},
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
			e.s.log.Error().Err(err).Msg("testcluster: opcua")
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

// reset deletes every session and subscription, as a process death does,
// and waits for the subscription goroutines. Connections must be closed
// first, so that no goroutine is stuck writing to a live one.
func (e *uaEngine) reset() {
	e.mu.Lock()
	exits := make([]chan struct{}, 0, len(e.subs))
	for _, sub := range e.subs {
		e.deleteSubLocked(sub)
		exits = append(exits, sub.exited)
	}
	clear(e.sessions)
	e.mu.Unlock()
	for _, ch := range exits {
		<-ch
	}
}

// stop is reset for good: no subscription can be created after it.
func (e *uaEngine) stop() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.reset()
	e.wg.Wait()
}

// OPCUAStats counts what a server has served since the pair started.
type OPCUAStats struct {
	Sessions        int    // open sessions
	Subscriptions   int    // live subscriptions
	MonitoredItems  int    // monitored items in live subscriptions
	QueuedPublishes int    // Publish requests waiting for a response
	Notifications   uint64 // data change notifications sent
	Publishes       uint64 // PublishResponses sent, keep-alives included
	KeepAlives      uint64 // keep-alive PublishResponses sent
	Overflows       uint64 // samples discarded because an item's queue was full
	SendErrors      uint64 // PublishResponses that failed to send
}

func (e *uaEngine) stats() OPCUAStats {
	e.mu.Lock()
	st := OPCUAStats{Sessions: len(e.sessions), Subscriptions: len(e.subs)}
	for _, sub := range e.subs {
		st.MonitoredItems += len(sub.items)
	}
	for _, sess := range e.sessions {
		st.QueuedPublishes += len(sess.pubq)
	}
	e.mu.Unlock()
	st.Notifications = e.notifications.Load()
	st.Publishes = e.publishes.Load()
	st.KeepAlives = e.keepAlives.Load()
	st.Overflows = e.overflows.Load()
	st.SendErrors = e.sendErrors.Load()
	return st
}

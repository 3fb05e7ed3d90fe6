package uaclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"
)

// The successor. A relay that dies leaves its data subscription on the
// server: a subscription outlives its session for its lifetime (lifetime
// count x publishing interval), and the server keeps every data message
// not acknowledged - with WithAckAfterStore, every one not stored. A Pair
// given the predecessor's Handoff (WithTakeover) builds from it what a
// serving session that lost its link leaves behind (a remnant, resume.go):
// the subscription's numbering at the first message not acknowledged, and
// the monitored items with their settings. The first session on the
// recorded endpoint takes the data subscription over
// (TransferSubscriptions, sendInitialValues false: the values the
// predecessor relayed are not sent again), creates a health subscription
// of its own, acknowledges what the predecessor stored and asks for the
// rest (Republish), in order; the items are reconciled with the ones the
// user adds, touching only differences. No snapshot: nothing was lost.
// When the transfer fails (the subscription is gone, the server refuses,
// the server restarted), the session creates new subscriptions and a
// snapshot follows, as after any new session; the fallback is reported
// once (EventTakeover, PairStatus.SuccessorFallbacks).

// takeoverRemnant builds, from a predecessor's handoff, the remnant that
// the first session on its endpoint takes over. It reports why it cannot
// when the handoff is not for this Pair's endpoints or is unreadable.
func (p *Pair) takeoverRemnant(h Handoff, now time.Time) (servicelevel.Endpoint, *remnant, error) {
	var ep servicelevel.Endpoint
	switch h.Endpoint {
	case servicelevel.Primary.String():
		ep = servicelevel.Primary
	case servicelevel.Backup.String():
		ep = servicelevel.Backup
	default:
		return 0, nil, fmt.Errorf("endpoint %q is neither primary nor backup", h.Endpoint)
	}
	if h.URL == "" || h.URL != p.urls[ep] {
		return 0, nil, fmt.Errorf("recorded for %s %s, but the %s is %s", h.Endpoint, h.URL, h.Endpoint, p.urls[ep])
	}
	if h.DataSub == 0 {
		return ep, nil, errSwitching
	}
	if h.NextUnacked == 0 {
		return 0, nil, fmt.Errorf("no sequence number for data subscription %d", h.DataSub)
	}
	st := newItemState()
	for _, it := range h.Items {
		spec, err := it.spec()
		if err != nil {
			return 0, nil, err
		}
		st.have[it.Handle] = &monItem{id: it.ID, mode: ua.MonitoringModeReporting, spec: spec}
	}
	interval := time.Duration(h.DataIntervalMs * float64(time.Millisecond))
	if interval <= 0 {
		interval = p.set.PublishingInterval
	}
	keepAlive := h.DataKeepAliveCount
	if keepAlive == 0 {
		keepAlive = dataKeepAlive(p.set.PublishingInterval)
	}
	exited := make(chan struct{})
	close(exited)
	c := &conn{p: p, ep: ep, url: h.URL, exited: exited, healthSub: h.HealthSub, dataSub: h.DataSub,
		dataQuiet: 3*time.Duration(keepAlive)*interval + p.set.HeartbeatTimeout,
		link:      LinkParams{Data: SubscriptionParams{Interval: interval, LifetimeCount: h.DataLifetimeCount, KeepAliveCount: keepAlive}},
		items:     st}
	data := newSubscription(h.DataSub, "data")
	data.afterStore = p.opt.afterStore != nil
	data.seq.next, data.seq.horizon, data.acked = h.NextUnacked, h.NextUnacked, h.NextUnacked
	from := &session{p: p, ep: ep, conn: c, phase: phaseDead, subs: map[uint32]*subscription{h.DataSub: data},
		items: withoutFences(h.Items), fence: fenceOf(h.Items)}
	c.s = from
	return ep, &remnant{from: from, lostAt: now, takeover: true}, nil
}

// startTakeover puts the predecessor's handoff, if any, in place for the
// first session on its endpoint; with no items added yet, the handoff's
// are adopted, so that what the server gives back for them is relayed
// (the first AddItems then says which stay). Called by Start, before the
// loop runs.
func (p *Pair) startTakeover(now time.Time) {
	h := p.opt.takeover
	if h == nil {
		return
	}
	ep, r, err := p.takeoverRemnant(*h, now)
	if errors.Is(err, errSwitching) {
		// The predecessor had just switched to ep: it serves there, but
		// neither its subscription nor the one before may be taken over.
		p.pol.StartOn(ep)
		p.setStartStatus()
		p.successorFallback(ep, err, now)
		return
	}
	if err != nil {
		p.log.Warn().Err(err).Msg("the predecessor's handoff does not fit this source: new subscriptions and a snapshot")
		return
	}
	p.remnants[ep] = r
	// The predecessor may have served from the backup (it stayed there
	// after a failover): the Pair starts there, as its active, to take
	// the subscription over; a standby session would leave it, and what
	// the server held for it, behind.
	p.pol.StartOn(ep)
	p.setStartStatus()
	if len(p.items) > 0 {
		return
	}
	p.adopted = map[uint32]bool{}
	for h, m := range r.from.conn.items.have {
		spec := m.spec
		p.items[h] = &spec
		p.adopted[h] = true
	}
}

// setStartStatus shows the endpoint the Pair starts on.
func (p *Pair) setStartStatus() {
	p.statusMu.Lock()
	p.status.Active, p.status.ActiveURL, p.status.Policy = p.pol.Active(), p.urls[p.pol.Active()], p.pol.Status()
	p.statusMu.Unlock()
}

// releaseAdopted ends the adoption of the handoff's items at the first
// AddItems: the items it adds again stay (registered anew, the same
// settings touch nothing at the server), the others go.
func (p *Pair) releaseAdopted() {
	if p.adopted == nil {
		return
	}
	for h := range p.adopted {
		delete(p.items, h)
	}
	p.adopted = nil
}

// errTransferRefused marks a takeover the server refused: the session
// goes on with new subscriptions.
var errTransferRefused = errors.New("the server did not transfer the data subscription")

// errSwitching marks a handoff recorded as the predecessor switched
// servers (recordSwitch): nothing in it may be taken over.
var errSwitching = errors.New("the predecessor had just switched to this server: no subscription may be taken over")

// takenOver starts the numbering of a data subscription taken over from
// a predecessor, given the numbers the server still holds
// (AvailableSequenceNumbers): those before the first the predecessor did
// not acknowledge are acknowledged now (returned); the others are asked
// for at once (Republish). A number the server no longer holds before
// the oldest it holds was acknowledged by the predecessor after its last
// record: delivery starts at the oldest held. With none held, every
// number the server cannot give back before the first it sends was
// acknowledged so too, and is given up quietly (not reported lost).
func (sb *subscription) takenOver(avail []uint32, now time.Time) []uint32 {
	if len(avail) == 0 {
		sb.quietFrom = sb.acked
		return nil
	}
	lo := avail[0]
	for _, n := range avail {
		if seqDiff(n, lo) < 0 {
			lo = n
		}
	}
	if seqDiff(lo, sb.acked) > 0 {
		sb.acked, sb.seq.next = lo, lo
		if seqDiff(sb.seq.horizon, lo) < 0 {
			sb.seq.horizon = lo
		}
	}
	var acks []uint32
	for _, n := range avail {
		if seqDiff(n, sb.acked) < 0 {
			acks = append(acks, n)
		}
	}
	sb.raiseHorizon(avail, now)
	if !sb.seq.since.IsZero() {
		// No reorder to wait for: these were sent to the predecessor.
		sb.seq.since = now.Add(-sb.seq.wait)
	}
	return acks
}

// quiet reports that number n, which the server cannot give back, was
// acknowledged by a predecessor after its last record (see takenOver).
func (sb *subscription) quiet(n uint32) bool {
	return sb.quietFrom != 0 && seqDiff(n, sb.quietFrom) >= 0 && (sb.quietTo == 0 || seqDiff(n, sb.quietTo) < 0)
}

// successorUp reports a takeover that worked: the Pair is ready (the data
// path is up, no snapshot is owed) and it is counted.
func (p *Pair) successorUp(s *session, avail int, now time.Time) {
	p.successorTransfers++
	p.emit(Event{Kind: EventTakeover, At: now, Endpoint: s.ep, Role: RoleActive, Level: s.level, Transferred: true,
		Message: fmt.Sprintf("%s: the predecessor's data subscription %d taken over (%d messages held by the server, from %d on); no snapshot",
			s.ep, s.conn.dataSub, avail, s.subs[s.conn.dataSub].acked)})
	p.out.after(func() { p.readyOnce.Do(func() { close(p.ready) }) })
}

// successorFallback reports a takeover that did not work, once: new
// subscriptions and a snapshot follow.
func (p *Pair) successorFallback(ep servicelevel.Endpoint, why error, now time.Time) {
	p.successorFallbacks++
	if why == nil {
		why = errors.New("the predecessor's session was not taken over")
	}
	p.emit(Event{Kind: EventTakeover, At: now, Endpoint: ep, Role: RoleActive, Err: why,
		Message: fmt.Sprintf("%s: the predecessor's data subscription was not taken over (%v): new subscriptions and a snapshot; "+
			"what the server produced since the predecessor's last stored message is lost", ep, why)})
}

// recordHandoff tells the recorder (WithHandoffRecorder) what a successor
// needs now, when it changed: the serving session's subscriptions, how far
// they are acknowledged and its items. After a switch (recordSwitch) the
// data subscription is named once the snapshot is read, with the
// snapshot's values as the items' fences until its first message after
// the snapshot is stored: a successor that asks for the messages before
// again must drop what they hold of older values, as the Pair did.
func (p *Pair) recordHandoff() {
	f, s := p.opt.onHandoff, p.serving
	if f == nil || s == nil || s.dead() || !s.serves() {
		return
	}
	sb := s.subs[s.conn.dataSub]
	if sb == nil {
		return
	}
	items := s.items
	switch {
	case s.switchFence == nil:
	case s.recordFrom == 0:
		return // the switch's record stands
	case seqDiff(sb.acked, s.recordFrom) > 0:
		s.switchFence = nil
	default:
		items = fencedItems(items, s.switchFence)
	}
	d := s.conn.link.Data
	h := Handoff{URL: s.conn.url, Endpoint: s.ep.String(), HealthSub: s.conn.healthSub, DataSub: s.conn.dataSub,
		NextUnacked: sb.acked, DataIntervalMs: msFloat(d.Interval), DataLifetimeCount: d.LifetimeCount,
		DataKeepAliveCount: d.KeepAliveCount, Items: items}
	last := p.handoff
	if last.URL == h.URL && last.HealthSub == h.HealthSub && last.DataSub == h.DataSub && last.NextUnacked == h.NextUnacked &&
		slices.EqualFunc(last.Items, h.Items, HandoffItem.same) {
		return
	}
	p.handoff = h
	f(h)
}

// recordSwitch tells the recorder, as s takes the data path over from
// another session, that nothing may be taken over (DataSub 0) until s's
// snapshot is read: the subscription the data came from may still hold
// messages older than what s is about to deliver. With WithHandoffSync,
// what s delivers waits until that is durable: a successor must never
// take the old subscription over once anything of s is stored.
func (p *Pair) recordSwitch(s *session) {
	f := p.opt.onHandoff
	if f == nil {
		return
	}
	s.recordFrom, s.switchFence = 0, map[uint32]*ua.DataValue{}
	h := Handoff{URL: s.conn.url, Endpoint: s.ep.String(), HealthSub: s.conn.healthSub, Items: s.items}
	p.handoff = h
	f(h)
	if sync := p.opt.syncHandoff; sync != nil {
		p.out.after(func() { p.waitHandoffSync(sync, s.ep) })
	}
}

// handoffSyncBound bounds the wait for a switch's record (WithHandoffSync):
// past it the data goes on, and a successor may take the old
// subscription over.
const handoffSyncBound = 5 * time.Second

// waitHandoffSync waits, on the data handler's goroutine, for sync to
// report the switch's record durable, at most handoffSyncBound or until
// Close.
func (p *Pair) waitHandoffSync(sync func(context.Context) error, to servicelevel.Endpoint) {
	ctx, cancel := context.WithTimeout(context.Background(), handoffSyncBound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sync(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-p.stop:
		cancel()
		<-done
		return
	}
	if err != nil {
		p.log.Warn().Err(err).Str("member", to.String()).
			Msg("the switch to " + to.String() + " could not be recorded: a successor may take the previous subscription over")
	}
}

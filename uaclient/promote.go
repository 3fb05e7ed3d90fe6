package uaclient

import (
	"fmt"
	"slices"
	"time"

	"github.com/gopcua/opcua/ua"
)

// activate starts the promotion of s: its items are created (or switched
// to Reporting) and read, batch by batch; onSnapshotPart hands the data
// path over with the first batch and onReconciled completes it.
func (p *Pair) activate(s *session, now time.Time) {
	if o := p.activating; o != nil && o != s {
		// The Policy moved on while o was being promoted: o's snapshot,
		// begun or not, is superseded by s's.
		o.promotion = nil
		if p.serving == o {
			o.to(phaseServing) // promoted again while it served: it goes on
		} else {
			o.to(phaseStandby)
		}
	}
	if !s.promoting() {
		if s.resumed != nil {
			s.resumed = nil // a snapshot replaces the recovery
		}
		s.to(phasePromoting)
	}
	p.activating = s
	p.pushDesires()
}

// pushDesires tells every live session which items it must have: all of
// them, Reporting, on the active (with a snapshot while it is promoted);
// all of them, Sampling, on a Hot standby, Disabled on a Prepared one;
// none on a Warm standby.
func (p *Pair) pushDesires() {
	items := p.items.list()
	for _, s := range p.sess {
		if s == nil || !s.up() {
			continue
		}
		p.version++
		s.wantVer = p.version
		d := desire{version: p.version, items: items, mode: ua.MonitoringModeReporting}
		switch {
		case s.promoting():
			d.snapshot = true
			s.promotion.ver = p.version
		case s.serves():
		case p.set.Mode == ModeHot:
			d.mode = ua.MonitoringModeSampling
		case p.set.Mode == ModePrepared:
			d.mode = ua.MonitoringModeDisabled
		default:
			d.items = nil
		}
		s.conn.setDesire(d)
	}
}

// onSnapshotPart relays one batch of a promotion's snapshot. The first
// batch takes the data path over: the snapshot opens, and the session that
// served stops delivering (a server that is leaving would only send
// Bad_OutOfService now). Batches finish in any order and are relayed in
// the items' order. Data changes of the new session wait until the
// snapshot is whole, so that each item's value from the snapshot comes
// first.
func (p *Pair) onSnapshotPart(ev evSnapshotPart, now time.Time) {
	s := ev.s
	if !s.promoting() || ev.version < s.promotion.ver {
		return // superseded: a newer desire reads every item again
	}
	if s.phase != phaseCutOver {
		p.cutOver(s, now)
	}
	pr := s.promotion
	if pr.snapVer != ev.version {
		// A newer desire (items added meanwhile) reads every item again:
		// its values go on in the same snapshot, from its first item.
		pr.snapVer, pr.next, pr.pending = ev.version, 0, nil
	}
	if ev.start != pr.next {
		if pr.pending == nil {
			pr.pending = map[int]evSnapshotPart{}
		}
		pr.pending[ev.start] = ev
		return
	}
	for {
		for _, v := range ev.values {
			p.out.data(Update{Kind: UpdateRefreshValue, Epoch: p.epoch, Endpoint: s.ep, Handle: v.handle, Value: v.dv, Received: now})
			s.fence[v.handle] = v.dv
			if s.switchFence != nil {
				s.switchFence[v.handle] = v.dv
			}
		}
		pr.next += len(ev.values)
		next, ok := pr.pending[pr.next]
		if !ok {
			return
		}
		delete(pr.pending, pr.next)
		ev = next
	}
}

// cutOver opens s's snapshot and stops the data of the session it
// replaces.
func (p *Pair) cutOver(s *session, now time.Time) {
	if h := p.hold; h != nil {
		p.releaseHold(h.s != s)
	}
	p.epoch++
	s.to(phaseCutOver)
	pr := s.promotion
	pr.snapVer, pr.next, pr.pending = 0, 0, nil
	total := len(p.items)
	s.fence = make(map[uint32]*ua.DataValue, total)
	p.recordSwitch(s)
	p.out.data(Update{Kind: UpdateRefreshStart, Epoch: p.epoch, Endpoint: s.ep, Cause: pr.cause, Items: total, Received: now})
	if old := p.serving; old != nil && old != s {
		p.demote(old)
		p.serving = nil
	}
	if pr.firstValueAt.IsZero() {
		pr.firstValueAt = now
	}
}

// demote ends old's carrying of the data: another session carries it now.
func (p *Pair) demote(old *session) {
	old.resumed = nil
	old.fence = nil
	old.to(phaseStandby)
}

func (p *Pair) onReconciled(ev evReconciled, now time.Time) {
	s := ev.s
	if s.dead() {
		return
	}
	if ev.err != nil {
		p.sessionLost(s, ev.err)
		return
	}
	p.answerWaiters(s, ev)
	if ev.items != nil {
		s.items = ev.items
		defer p.recordHandoff()
	}
	if s.promoting() && ev.snapshotted && ev.version >= s.promotion.ver {
		if s.phase != phaseCutOver {
			p.cutOver(s, now) // no items: an empty snapshot
		}
		p.promoted(s, ev, now)
	}
}

// promoted completes a promotion: the snapshot closes, the data
// notifications that arrived meanwhile follow, then the old active is
// released and the Policy learns that the new active is up.
func (p *Pair) promoted(s *session, ev evReconciled, now time.Time) {
	pr := s.promotion
	cause, items := pr.cause, pr.next
	p.out.data(Update{Kind: UpdateRefreshEnd, Epoch: p.epoch, Endpoint: s.ep, Cause: cause, Items: items, Received: now})

	old := p.serving
	s.promotion = nil
	s.to(phaseServing)
	p.activating = nil
	p.serving = s
	if sb := s.subs[s.conn.dataSub]; sb != nil && s.switchFence != nil {
		s.recordFrom = sb.seq.next
	}
	p.deliver(s, pr.buffered)
	if old != nil && old != s {
		p.demote(old)
	}
	p.pushDesires() // releases the old active's items

	took := now.Sub(p.switchAt)
	first := pr.firstValueAt.Sub(p.switchAt)
	p.emit(Event{Kind: EventSessionUp, At: now, Endpoint: s.ep, Role: RoleActive, Level: s.level, Cause: cause, Duration: took,
		Message: fmt.Sprintf("%s carries the data (%s): %d items, snapshot %d, first values %v and the whole snapshot %v after the %s decision",
			s.ep, levelText(s.level, s.levelProblem), items, p.epoch, first.Round(time.Microsecond), took.Round(time.Microsecond), cause)})
	failed := make([]uint32, 0)
	for h, code := range ev.status {
		if code != ua.StatusOK {
			failed = append(failed, h)
		}
	}
	slices.Sort(failed)
	for _, h := range failed {
		code := ev.status[h]
		p.emit(Event{Kind: EventItemFailed, At: now, Endpoint: s.ep, Role: RoleActive, Handle: h, Err: code,
			Message: fmt.Sprintf("item %d (%s) rejected by %s: %v", h, p.items.nodeOf(h), s.ep, code)})
	}
	// The Pair is ready once the first snapshot, and what the first
	// samples made of it, have reached the handlers.
	defer p.out.after(func() { p.readyOnce.Do(func() { close(p.ready) }) })

	p.recordHandoff()
	p.tellPolicyServing(s, now)
}

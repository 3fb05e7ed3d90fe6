package uaclient

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"
)

// connectActive makes d.To carry the data: it promotes the session there
// if one is up, lets one that is connecting finish first, or connects.
func (p *Pair) connectActive(d servicelevel.Decision, now time.Time) {
	s := p.sess[d.To]
	if s == nil {
		s = p.startSession(d.To, d.DialTimeout, d.Attempt, RoleActive, now)
	}
	if s.promotion == nil {
		s.promotion = &promotion{}
	}
	s.promotion.cause = d.Cause
	s.attempt = d.Attempt
	if s.up() {
		p.activate(s, now)
	}
}

// ensureStandby connects the standby endpoint when it has no session,
// with a backoff between failed attempts.
func (p *Pair) ensureStandby(now time.Time) {
	e := p.pol.Active().Other()
	if p.single || p.sess[e] != nil || now.Before(p.standbyAt) {
		return
	}
	p.startSession(e, p.set.Failover.ConnectTimeout, 0, RoleStandby, now)
}

func (p *Pair) startSession(e servicelevel.Endpoint, dialTimeout time.Duration, attempt int, role Role, now time.Time) *session {
	p.nextID++
	s := newSession(p, e, p.nextID, dialTimeout)
	s.attempt = attempt
	if role == RoleActive {
		// The remnant stays with the Pair until a session is up: an
		// attempt that fails on the link leaves it to the next one.
		s.conn.from = p.remnants[e]
	}
	p.sess[e] = s
	if r := p.remnants[e]; role != RoleActive && r != nil {
		p.remnants[e] = nil // a standby has no data to recover
		if r.takeover {
			p.successorFallback(s.ep, fmt.Errorf("the predecessor served from the %s, which this Pair starts as its standby", e), now)
		}
	}
	msg := fmt.Sprintf("connecting %s %s (%s, dial timeout %v)", role, e, s.conn.url, dialTimeout)
	if attempt > 0 {
		msg = fmt.Sprintf("connecting %s %s (%s, attempt %d, dial timeout %v)", role, e, s.conn.url, attempt, dialTimeout)
	}
	p.emit(Event{Kind: EventConnecting, At: now, Endpoint: e, Role: role, Attempt: attempt, Message: msg})
	p.wg.Add(1)
	go s.conn.run()
	return s
}

func (p *Pair) onConnected(ev evConnected, now time.Time) {
	s := ev.s
	if s.dead() {
		return
	}
	if ev.err != nil {
		s.to(phaseDead)
		s.conn.cancel()
		p.sess[s.ep] = nil
		p.setLastErr(fmt.Errorf("%s %s: %w", s.ep, s.conn.url, ev.err))
		role := p.roleOf(s)
		p.emit(Event{Kind: EventConnectFailed, At: now, Endpoint: s.ep, Role: role, Attempt: s.attempt, Err: ev.err,
			Message: fmt.Sprintf("connect %s %s (%s) failed: %v", role, s.ep, s.conn.url, ev.err)})
		p.answerProbeWait(s.ep, now)
		switch {
		case s.promotion != nil && portClosed(ev.err):
			p.feed(p.pol.ConnectRefused(now))
		case s.promotion != nil:
			p.feed(p.pol.ConnectFailed(now))
		case isRefusal(ev.err):
			// Trying again sooner will not change the server's mind.
			p.standbyWait = p.set.Failover.ReconnectDelay
			p.standbyAt = now.Add(p.standbyWait)
		default:
			p.backoffStandby(now)
		}
		return
	}
	s.to(phaseStandby)
	p.remnants[s.ep] = nil
	if s.conn.how != resumeNone {
		// The subscriptions go on: so do their sequence numbers. A
		// Republish round of the old session will never be answered: its
		// numbers are asked for again.
		s.subs, s.fence, s.lastMsgs = s.conn.from.from.subs, s.conn.from.from.fence, s.conn.from.from.lastMsgs
		s.items = s.conn.from.from.items
		if s.subs[s.conn.healthSub] == nil {
			// A takeover: the health subscription is the session's own.
			s.subs[s.conn.healthSub] = newSubscription(s.conn.healthSub, "health")
		}
		for _, sb := range s.subs {
			sb.resumed(now)
		}
		if s.conn.from.takeover {
			s.conn.successor = true
			sb := s.subs[s.conn.dataSub]
			s.conn.ack(sb.id, sb.takenOver(s.conn.avail, now)...)
		}
	} else {
		data := newSubscription(s.conn.dataSub, "data")
		data.afterStore = p.opt.afterStore != nil
		s.subs = map[uint32]*subscription{
			s.conn.healthSub: newSubscription(s.conn.healthSub, "health"),
			s.conn.dataSub:   data,
		}
		switch {
		case s.conn.from != nil && s.conn.from.takeover:
			p.successorFallback(s.ep, s.conn.refused, now)
		case s.conn.from != nil:
			p.log.Warn().Str("endpoint", s.conn.url).Str("member", s.ep.String()).Msg("the server no longer had the session or its subscriptions: " +
				"a new session, and a snapshot, replace them; what the server produced meanwhile is lost")
		}
	}
	s.conn.from = nil
	if lp := s.conn.link; p.set.BlipTolerance > 0 && lp.Recoverable < p.set.BlipTolerance {
		ms := func(d time.Duration) int64 { return d.Milliseconds() }
		p.log.Warn().Str("endpoint", s.conn.url).Str("member", s.ep.String()).Int64("session_timeout_ms", ms(lp.SessionTimeout)).
			Int64("health_lifetime_ms", ms(lp.Health.Lifetime())).Int64("data_lifetime_ms", ms(lp.Data.Lifetime())).
			Int64("recoverable_ms", ms(lp.Recoverable)).Int64("blip_tolerance_ms", ms(p.set.BlipTolerance)).
			Msg("the server revised the session or subscription parameters below the blip tolerance")
	}
	s.lastBeat, s.lastData = now, now
	s.nextPoll = now.Add(p.set.PollInterval)
	p.checkServers(s, now)
	l, why := levelOf(s.conn.initial)
	if s.promotion == nil {
		p.standbyWait = 0
		p.emit(Event{Kind: EventSessionUp, At: now, Endpoint: s.ep, Role: RoleStandby, Level: l,
			Message: p.standbyUpText(s, l, why)})
	}
	p.onLevel(s, l, why, now)
	switch {
	case s.promotion != nil && s.conn.how != resumeNone:
		p.resumeServing(s, now)
	case s.promotion != nil:
		p.activate(s, now)
	default:
		p.pushDesires()
	}
	if w := p.probeWait; w.id != 0 && w.ep == s.ep {
		p.probeWait = probeWait{}
		if !s.conn.read(readProbe, w.id) {
			p.feed(p.pol.ProbeResult(now, w.id, servicelevel.Unknown()))
		}
	}
	// A new session on the configured server: the first chance to find
	// its partner, or a new one after a discovery that found nothing.
	p.startDiscovery(s, now)
}

func (p *Pair) backoffStandby(now time.Time) {
	p.standbyWait = min(max(2*p.standbyWait, 100*time.Millisecond), p.set.Failover.ReconnectDelay)
	p.standbyAt = now.Add(p.standbyWait)
}

func (p *Pair) roleOf(s *session) Role {
	if s.ep == p.pol.Active() {
		return RoleActive
	}
	return RoleStandby
}

// sessionLost ends s and tells the Policy what that means.
func (p *Pair) sessionLost(s *session, err error) {
	if s.dead() {
		return
	}
	now := time.Now()
	p.keepRemnant(s, now) // before the cancel: the close must leave the session be
	wasServing, wasPromoting, wanted := s.serves(), s.promoting(), s.promotion != nil
	s.to(phaseDead)
	s.conn.cancel()
	p.sess[s.ep] = nil
	p.setLastErr(fmt.Errorf("%s %s: %w", s.ep, s.conn.url, err))
	role := p.roleOf(s)
	p.emit(Event{Kind: EventSessionLost, At: now, Endpoint: s.ep, Role: role, Level: s.level, Err: err,
		Message: fmt.Sprintf("%s session on %s lost: %v", role, s.ep, err)})
	if wasServing {
		p.serving = nil
	}
	if wasPromoting {
		p.activating = nil
	}
	p.releaseWaiters(s)
	p.answerProbeWait(s.ep, now)
	if s.ep == p.pol.Active() {
		switch {
		case wasPromoting || wanted && !wasServing:
			p.feed(p.pol.ConnectFailed(now))
		case wasServing:
			p.feed(p.pol.LinkLost(now))
		}
		return
	}
	p.feed(p.pol.StandbyLevel(now, servicelevel.Unknown()))
	p.backoffStandby(now)
}

// keepRemnant keeps what the next session on s's endpoint needs to take s
// over, if s served the data and the Pair tolerates blips. The client's
// session is detached before the client closes, so that the close does
// not end it on the server.
func (p *Pair) keepRemnant(s *session, now time.Time) {
	if !s.serves() || p.set.BlipTolerance == 0 || s.conn.client == nil || s.conn.link.SessionTimeout == 0 {
		return
	}
	cs := s.conn.client.Session()
	if cs == nil {
		return
	}
	s.conn.keep.Store(true)
	p.remnants[s.ep] = &remnant{from: s, sess: cs, lostAt: now}
}

// resumeServing makes s, which took over the serving session's
// subscriptions, carry the data at once: no snapshot is needed, since
// nothing is lost; its sequencers ask for what went missing, and
// checkRecovered reports the recovery once the gaps are closed.
func (p *Pair) resumeServing(s *session, now time.Time) {
	s.promotion = nil
	s.to(phaseRecovering)
	p.serving = s
	// A server may send the samples of its last messages before the
	// break again, in new messages on the new channel (node-opcua does
	// when the session is activated again at once): they were delivered
	// already.
	r := &resumption{since: now, recent: map[uint32]*ua.DataValue{}}
	for _, notes := range s.lastMsgs {
		for _, n := range notes {
			r.recent[n.handle] = n.dv
		}
	}
	s.resumed = r
	p.pushDesires()
	p.recordHandoff()
	if s.conn.successor {
		p.successorUp(s, len(s.conn.avail), now)
	}
	if p.tellPolicyServing(s, now) {
		p.checkRecovered(s, now)
	}
}

// recoverBound is how long after a resume the recovery is reported at the
// latest, gaps closed or not: a gap still open then is being asked for,
// and its outcome is reported on its own (EventNotificationsLost).
const recoverBound = 2 * time.Second

// checkRecovered reports a resumed session's recovery once the data
// subscription has answered on the new channel and neither subscription
// has a gap left, or after recoverBound.
func (p *Pair) checkRecovered(s *session, now time.Time) {
	r := s.resumed
	if s.phase != phaseRecovering {
		return
	}
	if now.Sub(r.since) < recoverBound {
		if !r.dataSeen {
			return
		}
		for _, sb := range s.subs {
			if !sb.settled() {
				return
			}
		}
	}
	s.resumed = nil
	s.to(phaseServing)
	if s.conn.successor {
		p.log.Info().Str("endpoint", s.conn.url).Str("member", s.ep.String()).Int("republished", r.republished).
			Msg("the successor caught up with what the server held for its predecessor")
		return
	}
	p.recoveries++
	how := "the session was activated on a new connection"
	if s.conn.how == resumeTransferred {
		how = "its subscriptions were transferred to a new session"
	}
	took := now.Sub(s.conn.lostAt)
	p.emit(Event{Kind: EventLinkRecovered, At: now, Endpoint: s.ep, Role: RoleActive, Level: s.level, Duration: took,
		Republished: r.republished, Transferred: s.conn.how == resumeTransferred,
		Message: fmt.Sprintf("%s link recovered %v after it was lost: %s, %d notifications republished, nothing lost that the server kept",
			s.ep, took.Round(time.Millisecond), how, r.republished)})
}

type probeWait struct {
	id       servicelevel.ProbeID
	ep       servicelevel.Endpoint
	deadline time.Time
}

func (p *Pair) probe(d servicelevel.Decision, now time.Time) {
	s := p.sess[d.To]
	switch {
	case s != nil && s.up() && s.conn.read(readProbe, d.Probe):
	case s != nil && s.phase == phaseConnecting:
		// The standby is still connecting (at startup, or after it was
		// lost): it answers when it is up, or Unknown at the deadline.
		p.probeWait = probeWait{id: d.Probe, ep: d.To, deadline: now.Add(p.set.ReadTimeout)}
	default:
		id := d.Probe
		p.later = append(p.later, func() { p.feed(p.pol.ProbeResult(time.Now(), id, servicelevel.Unknown())) })
	}
}

func (p *Pair) answerProbeWait(e servicelevel.Endpoint, now time.Time) {
	if w := p.probeWait; w.id != 0 && w.ep == e {
		p.probeWait = probeWait{}
		p.feed(p.pol.ProbeResult(now, w.id, servicelevel.Unknown()))
	}
}

// onLevel takes one ServiceLevel sample of s.
func (p *Pair) onLevel(s *session, l servicelevel.Level, why string, now time.Time) {
	s.level, s.sampled = l, true
	switch {
	case l.Known():
		s.levelProblem = ""
	case why != s.levelProblem:
		s.levelProblem = why
		role := p.roleOf(s)
		p.emit(Event{Kind: EventLevelUnreadable, At: now, Endpoint: s.ep, Role: role, Reason: why,
			Message: fmt.Sprintf("%s (%s) ServiceLevel is unreadable (%s): counted as unknown", s.ep, role, why)})
	}
	if s.ep != p.pol.Active() {
		p.feed(p.pol.StandbyLevel(now, p.standbyLevel(l)))
		return
	}
	if s.serves() {
		p.feed(p.pol.ActiveLevel(now, l))
	}
	// A session being promoted keeps the sample for SessionUp.
}

func (p *Pair) onRead(ev evRead, now time.Time) {
	s := ev.s
	if ev.kind == readPoll {
		s.polling = false
	}
	if s.dead() {
		if ev.kind == readProbe {
			p.feed(p.pol.ProbeResult(now, ev.probe, servicelevel.Unknown()))
		}
		return
	}
	if ev.err != nil {
		if ev.kind == readProbe {
			p.feed(p.pol.ProbeResult(now, ev.probe, servicelevel.Unknown()))
		}
		p.sessionLost(s, ev.err)
		return
	}
	l, why := levelOf(ev.dv)
	if ev.kind == readPoll {
		p.onLevel(s, l, why, now)
		return
	}
	s.level, s.sampled = l, true
	if !l.Known() && why != s.levelProblem {
		s.levelProblem = why
		p.emit(Event{Kind: EventLevelUnreadable, At: now, Endpoint: s.ep, Role: p.roleOf(s), Reason: why,
			Message: fmt.Sprintf("%s ServiceLevel is unreadable (%s): the probe counts it as unknown", s.ep, why)})
	}
	p.feed(p.pol.ProbeResult(now, ev.probe, p.standbyLevel(l)))
}

// levelOf maps a ServiceLevel DataValue to a Level, and says why it is
// Unknown when it is.
func levelOf(dv *ua.DataValue) (servicelevel.Level, string) {
	if dv == nil {
		return servicelevel.Unknown(), "no value returned"
	}
	if dv.Status != ua.StatusOK {
		return servicelevel.Unknown(), "status " + dv.Status.Error()
	}
	var v any
	if dv.Value != nil {
		v = dv.Value.Value()
	}
	if v == nil {
		return servicelevel.Unknown(), "the server has no value"
	}
	l := servicelevel.LevelFromValue(v, true)
	if !l.Known() {
		return l, fmt.Sprintf("value is %T, not a Byte", v)
	}
	return l, ""
}

// tellPolicyServing tells the Policy that s carries the data, and the
// levels s and the standby last reported. It reports false when that made
// the Policy move on (s is no longer the one serving).
func (p *Pair) tellPolicyServing(s *session, now time.Time) bool {
	p.feed(p.pol.SessionUp(now))
	if s.dead() || p.serving != s {
		return false
	}
	if s.sampled {
		p.feed(p.pol.ActiveLevel(now, s.level))
	}
	if o := p.sess[s.ep.Other()]; o != nil && o.up() && o.sampled {
		p.feed(p.pol.StandbyLevel(now, p.standbyLevel(o.level)))
	}
	return true
}

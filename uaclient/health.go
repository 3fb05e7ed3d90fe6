package uaclient

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"

	"github.com/gopcua/opcua/ua"
)

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
		p.feed(p.pol.StandbyLevel(now, l))
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
	p.feed(p.pol.ProbeResult(now, ev.probe, l))
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
		p.feed(p.pol.StandbyLevel(now, o.level))
	}
	return true
}

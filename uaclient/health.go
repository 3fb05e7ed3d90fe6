package uaclient

import (
	"context"
	"errors"
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"
	"time"

	"github.com/gopcua/opcua/ua"
)

type probeWait struct {
	id       servicelevel.ProbeID
	ep       servicelevel.Endpoint
	deadline time.Time
}

func (p *Pair) onTimer(now time.Time) {
	if h := p.hold; h != nil && h.expired(now) {
		p.releaseHold(false)
	}
	// While the handlers are behind, the publishers hold back and the
	// subscriptions are silent on purpose: the gap checks stand down and
	// the polls alone watch the links.
	holding := p.out.full()
	for _, s := range p.sess {
		if s == nil || !s.up() {
			continue
		}
		if holding {
			s.lastBeat, s.lastData = now, now
		}
		if gap := now.Sub(s.lastBeat); gap >= p.set.HeartbeatTimeout {
			p.sessionLost(s, fmt.Errorf("heartbeat gap: nothing from the health subscription for %v (limit %v)",
				gap.Round(time.Millisecond), p.set.HeartbeatTimeout))
			continue
		}
		if gap := now.Sub(s.lastData); gap >= s.conn.dataQuiet {
			p.sessionLost(s, fmt.Errorf("the data subscription is silent: no answer for %v (limit %v)",
				gap.Round(time.Millisecond), s.conn.dataQuiet))
			continue
		}
		p.recoverGaps(s, now)
		p.checkRecovered(s, now)
		if !s.polling && !now.Before(s.nextPoll) {
			s.nextPoll = now.Add(p.set.PollInterval)
			if s.conn.read(readPoll, 0) {
				s.polling = true
			}
		}
	}
	if w := p.probeWait; w.id != 0 && !now.Before(w.deadline) {
		p.probeWait = probeWait{}
		p.feed(p.pol.ProbeResult(now, w.id, servicelevel.Unknown()))
	}
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

type readKind uint8

const (
	readPoll readKind = iota
	readProbe
)

// read reads ServiceLevel within the read timeout and posts the answer.
// It returns false if the session is closing (nothing is posted then).
func (c *conn) read(kind readKind, probe servicelevel.ProbeID) bool {
	if !c.acquire() {
		return false
	}
	timeout := c.p.set.ReadTimeout
	go func() {
		defer c.release()
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		defer cancel()
		dv, err := readValue(ctx, c.client, nodeServiceLevel())
		if err != nil && c.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("ServiceLevel read past its %v deadline", timeout)
		}
		c.p.post(evRead{s: c.s, kind: kind, probe: probe, dv: dv, err: err})
	}()
	return true
}

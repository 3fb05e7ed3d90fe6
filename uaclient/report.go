package uaclient

import (
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"

	"github.com/rs/zerolog"
)

// observe turns a Policy observation into an event.
func (p *Pair) observe(o servicelevel.Observation) {
	e := Event{At: o.At, Endpoint: o.Endpoint, Level: o.Level, FromBand: o.From, ToBand: o.To, Cause: o.Cause,
		Probe: o.Probe, Attempt: o.Attempt, Fast: o.Fast, Until: o.Until, Message: o.String()}
	switch o.Kind {
	case servicelevel.ActiveBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleActive
	case servicelevel.StandbyBandChanged:
		e.Kind, e.Role = EventLevelChanged, RoleStandby
	case servicelevel.StreakStarted:
		e.Kind = EventStreakStarted
	case servicelevel.StreakCleared:
		e.Kind = EventStreakCleared
	case servicelevel.ProbeAsked:
		e.Kind, e.Role = EventProbe, RoleStandby
	case servicelevel.ProbeAnswered:
		e.Kind, e.Role = EventProbeAnswered, RoleStandby
	case servicelevel.TriggerDeferred:
		e.Kind = EventTriggerDeferred
	case servicelevel.RetryScheduled:
		e.Kind = EventRetryScheduled
	default:
		return
	}
	p.emit(e)
}

// emit logs e and hands it to the event handler.
func (p *Pair) emit(e Event) {
	e.URL = p.set.Endpoints[e.Endpoint]
	var le *zerolog.Event
	switch e.Kind {
	case EventConnectFailed, EventSessionLost, EventLevelUnreadable, EventItemFailed, EventNotificationsLost:
		le = p.log.Warn()
	case EventProbe, EventProbeAnswered, EventRetryScheduled, EventConnecting:
		le = p.log.Debug()
	default:
		le = p.log.Info()
	}
	if e.Kind == EventConnectFailed && isRefusal(e.Err) {
		le = p.log.Error() // a configuration or trust problem: someone has to act
	}
	if le.Enabled() {
		// The keys are the relay's log vocabulary: endpoint is the server's
		// URL, member which of the pair it is; levels are numbers (-1
		// unknown), durations in milliseconds.
		le = le.Str("event", e.Kind.String()).Str("endpoint", e.URL).Str("member", e.Endpoint.String())
		if e.Kind == EventFailover {
			le = le.Str("to", e.Target.String()).Str("cause", e.Cause.String()).
				Int("service_level", levelNumber(e.Level)).Int("peer_service_level", levelNumber(e.PeerLevel)).
				Float64("duration_ms", float64(e.Duration.Microseconds())/1000)
		}
		if e.Kind == EventLinkRecovered {
			le = le.Int("republished", e.Republished).Float64("after_ms", float64(e.Duration.Microseconds())/1000)
		}
		if e.Kind == EventNotificationsLost {
			le = le.Uint32("subscription", e.Subscription).Str("missing", seqList(e.Missing))
		}
		if e.Err != nil {
			le = le.Err(e.Err)
		}
		le.Msg(e.Message)
	}
	// The handler reads Status when the event reaches it, on the output
	// goroutine, which can run before the loop publishes the status at the
	// end of its turn: publish it now, so that the event never arrives
	// with the status from before it. Otherwise a level change that is the
	// turn's last event leaves a handler's view stale until the next event
	// (a relay reported a healthy server as Degraded for minutes).
	p.publishStatus()
	p.out.event(e)
}

func (p *Pair) setLastErr(err error) {
	p.statusMu.Lock()
	p.lastErr = err
	p.statusMu.Unlock()
}

func (p *Pair) publishStatus() {
	ps := p.pol.Status()
	st := PairStatus{
		Active:      ps.Active,
		ActiveURL:   p.set.Endpoints[ps.Active],
		Connected:   ps.Connected && p.serving != nil && p.serving.ep == ps.Active && p.activating == nil,
		Switching:   p.activating != nil || p.sess[ps.Active] != nil && p.sess[ps.Active].phase == phaseConnecting,
		Items:       len(p.items),
		Failovers:   p.failovers,
		Recoveries:  p.recoveries,
		Republished: p.republished,
		Policy:      ps,
	}
	if s := p.sess[ps.Active]; s != nil && s.up() {
		st.Link = s.conn.link
	}
	if s := p.sess[ps.Active]; s != nil && s.sampled {
		st.ActiveLevel = s.level
	}
	st.ActiveBand = st.ActiveLevel.Band()
	if s := p.sess[ps.Active.Other()]; s != nil && s.sampled {
		st.StandbyLevel = s.level
	}
	for i, s := range p.sess {
		if s != nil {
			st.Sessions[i] = s.sessionState()
		}
	}
	p.statusMu.Lock()
	st.LastErr = p.lastErr
	p.status = st
	p.statusMu.Unlock()
}

func levelText(l servicelevel.Level, why string) string {
	if !l.Known() {
		if why != "" {
			return "ServiceLevel unknown: " + why
		}
		return "ServiceLevel unknown"
	}
	return fmt.Sprintf("ServiceLevel %s, %s", l, l.Band())
}

// levelNumber is a level for a log field: its value, -1 when unknown.
func levelNumber(l servicelevel.Level) int {
	if v, ok := l.Value(); ok {
		return int(v)
	}
	return -1
}

package mxsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/mxgateway"
)

// EventKind says what an Event reports.
type EventKind string

const (
	// EventSessionUp: a gateway's session opened and registered.
	EventSessionUp EventKind = "session-up"
	// EventSessionDown: a gateway's session ended or could not be opened.
	EventSessionDown EventKind = "session-down"
	// EventSwitch: the standby was promoted.
	EventSwitch EventKind = "switch"
)

// Event is a change of the source's sessions, for a library user
// (WithEventHandler) and the log.
type Event struct {
	Kind EventKind
	// Gateway is the gateway concerned; for a switch, the new active.
	Gateway string
	// From is the old active of a switch.
	From string
	// Cause says why: the error that ended a session, or what made the
	// source switch.
	Cause string
	At    time.Time
	// Took is, for a switch, the time from the detection of the dead
	// active to the new active relaying.
	Took time.Duration
}

func (e Event) String() string {
	switch e.Kind {
	case EventSwitch:
		return fmt.Sprintf("switched from %s to %s (%s) in %v", e.From, e.Gateway, e.Cause, roundTook(e.Took))
	case EventSessionDown:
		return fmt.Sprintf("session on %s down: %s", e.Gateway, e.Cause)
	}
	return fmt.Sprintf("session on %s up", e.Gateway)
}

// roundTook keeps a switch time readable without rounding a sub-millisecond
// one to 0s.
func roundTook(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}

type memberEventKind int

const (
	evUp memberEventKind = iota + 1
	evDown
	evOpenFailed
	evProbeFailed
)

type memberEvent struct {
	kind memberEventKind
	m    *member
	gen  uint64
	sess *mxgateway.Session
	err  error
	at   time.Time
}

func (s *Source) post(e memberEvent) {
	e.at = time.Now()
	select {
	case s.events <- e:
	case <-s.ctx.Done():
	}
}

// refreshState is the refresh a warm promotion opened: it ends when every
// tag has its first value from the new active, or at deadline.
type refreshState struct {
	pending  map[uint32]bool
	deadline time.Time
}

// refreshLimit bounds a warm promotion's refresh: tags whose first value
// has not come by then (a failed advise) do not hold it open.
const refreshLimit = 5 * time.Second

// watchPeriod is how often the supervisor checks heartbeats, probes and
// the refresh deadline.
const watchPeriod = 100 * time.Millisecond

// supervise is the source's one decision maker: it learns of sessions up
// and down, judges the active alive or dead and promotes the standby.
// Nothing here runs on a gRPC goroutine.
func (s *Source) supervise() {
	defer s.wg.Done()
	tick := time.NewTicker(watchPeriod)
	defer tick.Stop()
	var lastProbe time.Time
	probing := false
	probeDone := make(chan memberEvent, 1)
	for {
		select {
		case <-s.ctx.Done():
			return
		case e := <-s.events:
			s.handle(e)
		case e := <-probeDone:
			probing = false
			if e.err != nil {
				s.handle(e)
			}
		case <-tick.C:
			// The clock, not the ticker's value: under load that value
			// lags the send and can even go back (golang/go#80893), and
			// the watch measures silences against receive times.
			now := time.Now()
			s.watchHeartbeats(now)
			s.watchRefresh(now)
			if !probing && now.Sub(lastProbe) >= s.cfg.ProbeInterval {
				// No ping behind our own subscribe: on a worker that runs
				// one command at a time it would time the subscribe.
				// Nor to a gateway that does not advertise PingCommand,
				// which is ours: the stream and the transport keepalive
				// are what watch it then.
				if m, sess, gen := s.activeSession(); sess != nil && m.busy.Load() == 0 && sess.Has(mxgateway.CapPing) {
					probing, lastProbe = true, now
					s.wg.Add(1)
					go s.probe(m, sess, gen, probeDone)
				}
			}
		}
	}
}

// probe pings the active session; a ping past ProbeTimeout is reported.
func (s *Source) probe(m *member, sess *mxgateway.Session, gen uint64, done chan<- memberEvent) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ProbeTimeout)
	err := sess.Ping(ctx)
	cancel()
	e := memberEvent{kind: evProbeFailed, m: m, gen: gen, at: time.Now()}
	if err != nil && s.ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, mxgateway.ErrCommandTimeout)) {
		e.err = fmt.Errorf("%w: %v", errProbe, err)
	}
	done <- e
}

func (s *Source) activeSession() (*member, *mxgateway.Session, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active < 0 {
		return nil, nil, 0
	}
	m := s.members[s.active]
	return m, m.sess, m.gen
}

// watchHeartbeats ends a session whose stream has been silent too long.
func (s *Source) watchHeartbeats(now time.Time) {
	s.mu.Lock()
	var dead []*member
	var gens []uint64
	for _, m := range s.members {
		if m.sess == nil {
			continue
		}
		limit := s.cfg.heartbeatTimeout(m.sess.HeartbeatInterval())
		if limit > 0 && now.Sub(time.Unix(0, m.lastEvent.Load())) > limit {
			dead, gens = append(dead, m), append(gens, m.gen)
		}
	}
	s.mu.Unlock()
	for i, m := range dead {
		s.endSession(m, gens[i], errSilent)
	}
}

// watchRefresh ends a promotion's refresh at its deadline.
func (s *Source) watchRefresh(now time.Time) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	if r := s.refresh; r != nil && now.After(r.deadline) {
		s.refresh = nil
		s.handler().RefreshEnd()
	}
}

// openRefresh frames the first values of a new active session as a
// refresh: it ends when every tag has one, or at refreshLimit.
func (s *Source) openRefresh(reason string) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.mu.Lock()
	h := s.h
	closePrev := s.refresh != nil
	pending := make(map[uint32]bool, len(s.items))
	for handle := range s.items {
		pending[handle] = true
	}
	s.refresh = nil
	if len(pending) > 0 {
		s.refresh = &refreshState{pending: pending, deadline: time.Now().Add(refreshLimit)}
	}
	s.mu.Unlock()
	if closePrev {
		h.RefreshEnd()
	}
	if len(pending) > 0 {
		h.RefreshStart(reason)
	}
}

// endRefresh takes items whose advise failed out of the open refresh.
func (s *Source) endRefresh(items []*item) {
	if len(items) == 0 {
		return
	}
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	r := s.refresh
	if r == nil {
		return
	}
	for _, it := range items {
		delete(r.pending, it.tag.Handle)
	}
	if len(r.pending) == 0 {
		s.refresh = nil
		s.handler().RefreshEnd()
	}
}

func (s *Source) handler() bridge.Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// handle acts on one member event.
func (s *Source) handle(e memberEvent) {
	m := e.m
	switch e.kind {
	case evUp:
		s.mu.Lock()
		m.lastErr = ""
		becomes := s.active < 0
		reopened := becomes && s.connected
		reason := fmt.Sprintf("session reopened on %s", m.target)
		if becomes && s.fallback != "" && len(s.items) > 0 {
			// Without items yet (a relay starting) the bridge's first
			// subscribe opens the refresh (Subscribe).
			reopened, reason, s.fallback = true, s.fallback, ""
		}
		if becomes {
			s.active = m.idx
			s.connected = true
		}
		record := becomes && s.ho != nil && m.gen == e.gen && m.recordable()
		seen := m.lastDone
		s.mu.Unlock()
		if record {
			// A new session made the active one: the handoff names it
			// at once (see handoff.switched).
			s.emitMu.Lock()
			s.ho.switched(m, e.gen, e.sess, seen)
			s.emitMu.Unlock()
		}
		s.log.Info().Str("endpoint", m.target).Str("session", e.sess.ID()).Strs("capabilities", e.sess.Capabilities()).
			Dur("command_timeout_ms", e.sess.CommandTimeout()).Bool("active", becomes).
			Bool("supervisory", e.sess.Supervisory()).Msg("gateway session open")
		if missing := missingOurs(e.sess); len(missing) > 0 {
			s.log.Info().Str("endpoint", m.target).Strs("not_advertised", missing).
				Msg("the gateway lacks apbridge's own capabilities: no health pings without ping-command, no silence watch without stream-heartbeats, a new session after a broken stream without event-resume")
		}
		if e.sess.CommandTimeout() != s.cfg.CommandTimeout {
			s.log.Warn().Str("endpoint", m.target).Dur("asked_ms", s.cfg.CommandTimeout).Dur("granted_ms", e.sess.CommandTimeout()).
				Msg("the gateway granted another command timeout than asked for")
		}
		s.emit(Event{Kind: EventSessionUp, Gateway: m.target, At: e.at})
		if becomes {
			if reopened {
				// The values that follow are every tag's current one
				// after an outage: a refresh, as after a switch.
				s.openRefresh(reason)
			}
			// A fresh session has nothing advised: the bridge subscribes
			// every tag again, through its guard.
			s.handler().Restored()
		} else {
			s.wakeStandby()
		}
	case evOpenFailed, evDown:
		s.mu.Lock()
		msg := e.err.Error()
		repeat := msg == m.lastErr
		m.lastErr = msg
		wasActive := s.active == m.idx && (e.kind == evDown)
		s.mu.Unlock()
		if !repeat || e.kind == evDown {
			s.log.Warn().Str("endpoint", m.target).Err(e.err).Msg(downMessage(e))
			s.emit(Event{Kind: EventSessionDown, Gateway: m.target, Cause: msg, At: e.at})
		}
		if wasActive {
			s.promote(m, e.err, e.at)
		}
	case evProbeFailed:
		s.mu.Lock()
		current := s.active == m.idx && m.gen == e.gen
		standby := s.standby()
		s.mu.Unlock()
		if !current {
			return
		}
		if standby == nil {
			// Nothing to promote: reopening would only resubscribe
			// everything on a gateway that is already slow.
			s.log.Warn().Str("endpoint", m.target).Err(e.err).Msg("gateway is slow to answer and there is no standby: staying")
			return
		}
		s.endSession(m, e.gen, e.err)
	}
	s.updateHealth()
}

func downMessage(e memberEvent) string {
	var fe *mxgateway.FaultError
	switch {
	case e.kind == evOpenFailed:
		return "gateway session could not be opened"
	case errors.As(e.err, &fe) && fe.Overflow():
		return "gateway faulted the session: its event queue overflowed, data changes were lost"
	case errors.Is(e.err, mxgateway.ErrSessionEnded):
		return "gateway ended the session"
	}
	return "gateway session lost"
}

// standby returns the member that could take over now; s.mu is held.
func (s *Source) standby() *member {
	for _, m := range s.members {
		if m.idx != s.active && m.sess != nil {
			return m
		}
	}
	return nil
}

// promote makes the standby active after old's session ended with cause,
// found at detected. Without a standby the source waits for a session.
func (s *Source) promote(old *member, cause error, detected time.Time) {
	s.emitMu.Lock()
	s.mu.Lock()
	next := s.standby()
	h := s.h
	if next == nil {
		s.active = -1
		s.mu.Unlock()
		s.emitMu.Unlock()
		s.log.Warn().Str("endpoint", old.target).Msg("no gateway session: waiting for one")
		return
	}
	s.active = next.idx
	hot := s.cfg.Mode == ModeHot
	nextGen, nextSess, seen := next.gen, next.sess, next.lastDone
	// A session still adopting a predecessor's items records itself
	// (adopt); a standby never is one, but the rule is adopt's. Changes
	// that came before their subscribe's answer (early) are relayed only
	// once it comes, after the switch: the record waits for them, as it
	// did before, for the first event stored from the session.
	record := s.ho != nil && next.recordable()
	// A switch during the last switch's refresh closes that one first,
	// so that every refresh-start has its refresh-end.
	closePrev := s.refresh != nil
	s.refresh = nil
	var replay []struct {
		handle uint32
		d      mxgateway.DataChange
	}
	pending := map[uint32]bool{}
	for handle, it := range s.items {
		if it.advised[next.idx] && it.last[next.idx] != nil {
			it.sent[next.idx] = it.last[next.idx].Seq
			d := *it.last[next.idx]
			if r := it.relayedD; !r.Timestamp.IsZero() && d.Timestamp.Before(r.Timestamp) {
				// The standby lags the old active: the refresh carries
				// the newest value the consumer has, not an older one;
				// the standby's queued changes are dropped up to it.
				d = r
			}
			it.relayed(d)
			replay = append(replay, struct {
				handle uint32
				d      mxgateway.DataChange
			}{handle, d})
		} else {
			pending[handle] = true
		}
	}
	s.mu.Unlock()
	if closePrev {
		h.RefreshEnd()
	}
	h.RefreshStart(fmt.Sprintf("%s: %s -> %s", causeText(cause), old.target, next.target))
	for _, r := range replay {
		h.Update(r.handle, toUpdate(r.d))
	}
	if record {
		// After the replay: the handoff's store mark covers it.
		s.ho.switched(next, nextGen, nextSess, seen)
	}
	if len(pending) == 0 {
		h.RefreshEnd()
		s.refresh = nil
	} else {
		s.refresh = &refreshState{pending: pending, deadline: time.Now().Add(refreshLimit)}
	}
	s.emitMu.Unlock()
	took := time.Since(detected)
	ev := Event{Kind: EventSwitch, Gateway: next.target, From: old.target, Cause: causeText(cause), At: detected, Took: took}
	s.mu.Lock()
	s.stats.Switches++
	s.stats.LastSwitch = ev
	s.mu.Unlock()
	s.log.Warn().Str("from", old.target).Str("to", next.target).Str("cause", ev.Cause).Bool("hot", hot).
		Int("replayed", len(replay)).Dur("took_ms", took).Msg("gateway switch: standby promoted")
	s.emit(ev)
	// What the new active lacks (everything, when warm) the bridge
	// subscribes again, through its guard; advised tags cost no command.
	h.Restored()
}

func causeText(err error) string {
	var fe *mxgateway.FaultError
	switch {
	case errors.Is(err, errProbe):
		return "health ping past its deadline"
	case errors.Is(err, errSilent):
		return "heartbeats missing"
	case errors.As(err, &fe) && fe.Overflow():
		return "event queue overflow"
	case errors.Is(err, mxgateway.ErrSessionEnded):
		return "session ended by the gateway"
	case errors.Is(err, mxgateway.ErrSessionLost):
		return "session lost"
	case errors.Is(err, mxgateway.ErrDisconnected):
		return "gateway unreachable"
	}
	return err.Error()
}

func (s *Source) emit(e Event) {
	if s.onEvent != nil {
		s.onEvent(e)
	}
}

// updateHealth recomputes the health and tells the bridge when it changed.
func (s *Source) updateHealth() {
	s.mu.Lock()
	h := bridge.Health{Level: -1, LastSwitch: s.health.LastSwitch, LastAt: s.health.LastAt,
		LastSwitchCause: s.health.LastSwitchCause, LastSwitchTook: s.health.LastSwitchTook}
	if s.stats.Switches > 0 {
		ls := s.stats.LastSwitch
		h.LastSwitch, h.LastAt, h.LastSwitchCause, h.LastSwitchTook = ls.String(), ls.At, ls.Cause, ls.Took
	}
	switch {
	case s.closed:
		h.State = bridge.StateClosed
	case s.active >= 0:
		a := s.members[s.active]
		h.Endpoint, h.Writable = a.target, true
		h.State = bridge.StateConnected
		if len(s.members) > 1 && s.standby() == nil {
			h.State = bridge.StateDegraded
			h.Detail = "no standby gateway"
			for _, m := range s.members {
				if m.idx != s.active && m.lastErr != "" {
					h.Detail += ": " + m.lastErr
				}
			}
		}
	case s.connected:
		h.State = bridge.StateDown
	default:
		h.State = bridge.StateConnecting
	}
	if h.State != bridge.StateConnected && h.Detail == "" {
		for _, m := range s.members {
			if m.lastErr != "" {
				h.Detail = m.target + ": " + m.lastErr
				break
			}
		}
	}
	changed := h != s.health
	s.health = h
	bh := s.h
	s.mu.Unlock()
	if changed && bh != nil {
		bh.HealthChanged(h)
	}
}

// missingOurs lists the capabilities of apbridge's own that sess's
// gateway did not advertise: the source does without them.
func missingOurs(sess *mxgateway.Session) []string {
	var out []string
	for _, c := range []string{mxgateway.CapPing, mxgateway.CapHeartbeat, mxgateway.CapEventResume} {
		if !sess.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

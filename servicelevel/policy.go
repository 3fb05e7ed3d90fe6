package servicelevel

import "time"

// connState is where the active endpoint's connection is.
type connState uint8

const (
	connIdle       connState = iota // before Start
	connConnecting                  // a connect or promotion is in flight
	connUp                          // a session is live
	connProbing                     // link lost after a degraded level; the peer is being asked
	connWaiting                     // waiting for the next connect attempt
)

// Policy decides when a pair of OPC UA endpoints fails over, from events a
// supervisor feeds it. It implements the rules of the ServiceLevel-aware
// failover design (ScadaBridge #138) and of its going-away follow-up for a
// server that stops (ScadaBridge #141), with a warm standby session in place
// of those designs' short-lived probe sessions, and keeps the connectivity
// failover of old (retries, then switch) for when ServiceLevel says
// nothing.
//
// A Policy does no I/O, starts no goroutines and reads no clock: every
// method takes the current time, and time-driven rules fire from Tick at
// NextDeadline. That makes every rule testable without sleeping, and lets
// the supervisor decide how events are serialised. A Policy is not safe
// for concurrent use; the supervisor calls it from one goroutine.
//
// Protocol. Call Start, then feed events as they happen and execute the
// returned Decision at once:
//
//   - SessionUp when the active endpoint's session carries data, after
//     Start, a reconnect or a switch (for a switch: when the promoted
//     session is active); ConnectFailed when that attempt failed.
//   - ActiveLevel for every ServiceLevel sample of the active session
//     (subscription updates and polls alike), Unknown() when a read failed
//     or was not a Good Byte. Feed them even when the feature is disabled:
//     the first sample proves a session is stable.
//   - ConnectRefused instead of ConnectFailed when the attempt was refused
//     (the port answered with a reset): the server process is gone.
//   - StandbyLevel whenever the standby's live level changes, Unknown()
//     when its session is down. The standby's changes are inputs like the
//     active's: a standby that rises can move the connection.
//   - ProbeResult for every ActionProbe, always, quoting its ProbeID:
//     Unknown() when the standby is unreachable or the probe timed out.
//     The Policy waits for that answer before it retries a lost link.
//   - LinkLost when the active session dies: a socket error, a heartbeat
//     gap or a read past its deadline.
//   - Tick when the time returned by NextDeadline has come; ask for
//     NextDeadline again after every call.
//
// Events that do not fit the state (a sample with no session, a second
// SessionUp, a stale probe answer) are ignored, so a supervisor may race
// a late callback against a switch without harm.
type Policy struct {
	set    Settings
	active Endpoint
	conn   connState

	// Connectivity.
	failed      int       // consecutive failed connect attempts on the active endpoint
	waitSince   time.Time // connProbing, connWaiting: when the wait for the next attempt began
	sessionUpAt time.Time // when the current session came up
	proven      bool      // the session delivered a sample or outlived a connect timeout
	blipWindow  time.Duration
	blipUntil   time.Time // retries are fast until then: the lost link may be a blip
	// lostDegraded: the link was lost after a level below 200 and the peer
	// was not preferable then; a peer that becomes so is switched to.
	lostDegraded bool

	// The active session's levels.
	last          Level     // last known level; an unknown sample never overwrites it
	judged        bool      // the connect-time check has seen a known sample
	degradedSince time.Time // start of the latest streak of this session
	activeBand    Band
	activeBandSet bool

	// The degraded streak and its triggers.
	streak       bool
	streakSince  time.Time
	streakSeq    uint64    // numbers streaks, so a probe answer is judged only in the streak that asked
	shortcutUsed bool      // the ServiceLevel 0 shortcut fired in this streak
	peerWanting  bool      // a trigger of this streak found the peer not preferable
	urgent       Cause     // a trigger that skips the window (connect-time, 0)
	urgentAt     time.Time // when it was raised
	rearmAt      time.Time // no window probe before this (one probe per window)
	deferNoted   bool      // TriggerDeferred was reported for the pending trigger

	// The standby's live level.
	standby        Level
	standbyBand    Band
	standbyBandSet bool

	// The outstanding probe.
	probeSeq    ProbeID
	probe       ProbeID // 0: none outstanding
	probeCause  Cause
	probeStreak uint64 // the streak the probe was asked in

	dwellUntil time.Time // no ServiceLevel switch before this

	// single is a Policy for one server: there is no peer to probe or to
	// switch to, so every rule that would move the connection retries the
	// same server instead.
	single bool

	obs []Observation // collected during the current call
}

// PolicyOption configures a Policy beyond its FailoverConfig.
type PolicyOption func(*Policy)

// WithBlipWindow sets how long after a lost link the supervisor can still
// resume the lost session (a blip): a link lost on a server that was not
// degraded is retried at once and then on the fast timing for that long,
// whatever the standby's level, because a blip that is ridden out costs
// nothing and a slow retry turns it into seconds of silence. Zero (the
// default) leaves the retry timing to the standby's level alone.
func WithBlipWindow(d time.Duration) PolicyOption {
	return func(p *Policy) { p.blipWindow = max(0, d) }
}

// NewPolicy validates cfg and returns a Policy whose active endpoint is
// Primary. The error joins one *FieldError per invalid field.
func NewPolicy(cfg FailoverConfig, opts ...PolicyOption) (*Policy, error) {
	s, err := cfg.Settings()
	if err != nil {
		return nil, err
	}
	p := &Policy{set: s, active: Primary}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// NewSinglePolicy is NewPolicy for one server: there is no peer to probe
// or to switch to, so every rule that would move the connection retries
// the same server instead.
func NewSinglePolicy(cfg FailoverConfig, opts ...PolicyOption) (*Policy, error) {
	p, err := NewPolicy(cfg, opts...)
	if p != nil {
		p.single = true
	}
	return p, err
}

// AddPeer turns a Policy made by NewSinglePolicy into one for a pair:
// the supervisor has found the server's partner (OPC UA partner
// discovery), whose standby level it reports from now on. The Policy
// keeps its state: the active server stays the active, and the peer's
// level is Unknown until reported. It does nothing to a Policy that has a
// peer.
func (p *Policy) AddPeer() { p.single = false }

// StartOn makes e the active endpoint that Start connects, in place of
// the primary: a successor that takes a predecessor's data subscription
// over starts where the predecessor served from, which may be the backup
// (it stayed there after a failover), or the subscription would be left
// behind with what the server held for it. It does nothing after Start,
// nor to a single-server Policy, which has no backup.
func (p *Policy) StartOn(e Endpoint) {
	if p.conn != connIdle || p.single || (e != Primary && e != Backup) {
		return
	}
	p.active = e
}

// Settings returns the resolved settings the Policy runs on.
func (p *Policy) Settings() Settings { return p.set }

// Active returns the endpoint that carries (or is being connected to
// carry) the data.
func (p *Policy) Active() Endpoint { return p.active }

// Status is a snapshot of the Policy for status pages and metrics.
type Status struct {
	Active         Endpoint
	Connected      bool
	ActiveLevel    Level     // last known level of the active's session
	StandbyLevel   Level     // the standby's live level
	DegradedSince  time.Time // start of the current degraded streak; zero if none
	DwellUntil     time.Time // end of the anti-flap dwell; zero or past if none
	ProbePending   bool
	FailedAttempts int // consecutive failed connect attempts on Active
}

// Status returns a snapshot of the Policy.
func (p *Policy) Status() Status {
	st := Status{
		Active:         p.active,
		Connected:      p.conn == connUp,
		ActiveLevel:    p.last,
		StandbyLevel:   p.standby,
		DwellUntil:     p.dwellUntil,
		ProbePending:   p.probe != 0,
		FailedAttempts: p.failed,
	}
	if p.streak {
		st.DegradedSince = p.streakSince
	}
	return st
}

// Start returns the first connect to the active endpoint (the primary,
// or the one StartOn chose), with the full connect timeout: fast timing
// is for retries, once an endpoint has failed and a Healthy standby is
// known to exist. Calls after the first do nothing.
func (p *Policy) Start(now time.Time) Decision {
	if p.conn != connIdle {
		return p.finish(now, Decision{})
	}
	p.conn = connConnecting
	return p.finish(now, Decision{
		Action:      ActionConnect,
		Cause:       CauseStartup,
		From:        p.active,
		To:          p.active,
		PeerLevel:   p.standby,
		DialTimeout: p.set.ConnectTimeout,
		Attempt:     1,
	})
}

// SessionUp reports that the connect or switch in flight succeeded: the
// active endpoint's session is live and carries the data subscription. A
// new session starts with no known level, so its first known sample is
// judged at once.
func (p *Policy) SessionUp(now time.Time) Decision {
	if p.conn != connConnecting {
		return p.finish(now, Decision{})
	}
	p.conn = connUp
	p.resetSession()
	p.sessionUpAt = now
	return p.finish(now, Decision{})
}

// ActiveLevel feeds one ServiceLevel sample of the active session.
//
// A known sample below 200 starts (or continues) a degraded streak; the
// peer is probed when the streak has lasted the degraded window, at once
// for the session's first known sample (connect-time preference) and at
// once for the first 0 of a streak (the ServiceLevel 0 shortcut). A
// Healthy or an unknown sample ends the streak; an unknown one does not
// replace the last known level, which a lost link is judged on.
func (p *Policy) ActiveLevel(now time.Time, l Level) Decision {
	if p.conn != connUp {
		return p.finish(now, Decision{})
	}
	if !p.proven {
		p.proven = true
		p.failed = 0
	}
	p.noteActiveBand(now, l)
	if l.Known() {
		p.last = l
	}
	if !p.set.Enabled {
		return p.finish(now, Decision{})
	}
	switch {
	case !l.Known():
		p.endStreak(now, CauseUnknownSample)
	case l.Healthy():
		p.judged = true
		p.endStreak(now, CauseHealthySample)
	default:
		if !p.streak {
			p.startStreak(now, l)
		}
		if !p.judged {
			p.judged = true
			p.raise(now, CauseConnectPreference)
		}
		if l.Maintenance() && !p.shortcutUsed {
			p.shortcutUsed = true
			p.raise(now, CauseMaintenance)
		}
	}
	return p.finish(now, Decision{})
}

// StandbyLevel feeds the standby's live level. A standby that is judged
// the same whether its level was there all along or arrived a moment ago:
//
//   - After a trigger of the active's degraded streak (the ServiceLevel 0
//     shortcut, the connect-time preference, the window) found the standby
//     wanting, a standby that becomes Healthy and higher than the active
//     raises CauseStandbyHealthy at once: the probe that confirms it is
//     asked now, not one degraded window later. Before the streak's first
//     trigger the window still applies, as it does to a standby that was
//     Healthy all along.
//   - While the active's link is lost after a degraded level, a standby
//     that becomes preferable is switched to at once.
//   - It sets the timing of connect retries on the active: while the
//     standby is Healthy a better path is proven to exist, so retries are
//     fast and short, and a failed endpoint is left within a second
//     instead of a minute.
//
// The anti-flap dwell holds all of these like any ServiceLevel trigger.
func (p *Policy) StandbyLevel(now time.Time, l Level) Decision {
	wasFast := p.fastRetry()
	p.setStandby(now, l)
	if p.conn == connUp && p.streak && p.peerWanting && p.probe == 0 && l.PreferableTo(p.last) {
		p.peerWanting = false
		p.raise(now, CauseStandbyHealthy)
	}
	if p.conn == connWaiting && p.fastRetry() != wasFast {
		p.observeRetry(now, CauseReconnect)
	}
	return p.finish(now, Decision{})
}

// ProbeResult answers the probe id with the standby's level, Unknown()
// if it could not be read. The Policy switches only to a peer that is
// Healthy and higher than the active's last known level; otherwise it
// stays, and a degraded streak probes again one window later.
func (p *Policy) ProbeResult(now time.Time, id ProbeID, peer Level) Decision {
	if id == 0 || id != p.probe {
		return p.finish(now, Decision{})
	}
	p.probe = 0
	p.observe(Observation{Kind: ProbeAnswered, At: now, Endpoint: p.active.Other(), Level: peer, Probe: id, Cause: p.probeCause})
	p.setStandby(now, peer)
	stay := Decision{From: p.active, To: p.active, ActiveLevel: p.last, PeerLevel: peer, Cause: stayCause(peer)}

	if p.conn == connProbing {
		if peer.PreferableTo(p.last) {
			return p.finish(now, p.switchTo(now, CauseLostLinkDegraded, peer))
		}
		// The ordinary retry cycle; waitSince is still the moment the link
		// was lost, so the time the probe took counts against the delay.
		// A peer that becomes preferable meanwhile is switched to.
		p.conn = connWaiting
		p.lostDegraded = true
		p.observeRetry(now, CauseLinkLost)
		return p.finish(now, stay)
	}
	if !p.streak || p.streakSeq != p.probeStreak {
		stay.Cause = CauseStreakBroken
		return p.finish(now, stay)
	}
	if peer.PreferableTo(p.last) {
		return p.finish(now, p.switchTo(now, p.probeCause, peer))
	}
	p.rearmAt = now.Add(p.set.DegradedWindow)
	p.peerWanting = true
	return p.finish(now, stay)
}

// Tick fires the time-driven rules that are due: a degraded window that
// expired, a trigger held by the dwell, a connect retry.
func (p *Policy) Tick(now time.Time) Decision {
	return p.finish(now, Decision{})
}

// NextDeadline returns when Tick next has something to do, and false if
// nothing is pending. A deadline in the past means now.
func (p *Policy) NextDeadline() (time.Time, bool) {
	switch p.conn {
	case connUp:
		if !p.set.Enabled || !p.streak || p.probe != 0 {
			return time.Time{}, false
		}
		due, _ := p.triggerDue()
		if due.Before(p.dwellUntil) && p.deferNoted {
			return p.dwellUntil, true
		}
		return due, true
	case connWaiting:
		return p.retryAt(), true
	}
	return time.Time{}, false
}

// finish runs what became due, unless the event already produced an action
// (the supervisor ticks again at once for the rest), and hands over the
// observations collected during the call.
func (p *Policy) finish(now time.Time, d Decision) Decision {
	if d.Action == ActionNone {
		if next := p.advance(now); next.Action != ActionNone {
			d = next
		}
	}
	d.Observations, p.obs = p.obs, nil
	return d
}

func (p *Policy) advance(now time.Time) Decision {
	switch p.conn {
	case connUp:
		return p.maybeProbe(now)
	case connWaiting:
		if p.lostDegraded && p.set.Enabled && !p.single && p.standby.PreferableTo(p.last) && !now.Before(p.dwellUntil) {
			return p.switchTo(now, CauseLostLinkDegraded, p.standby)
		}
		if !now.Before(p.retryAt()) {
			return p.connect(CauseReconnect)
		}
	}
	return Decision{}
}

// maybeProbe asks the peer when a ServiceLevel trigger is due and the dwell
// allows it.
func (p *Policy) maybeProbe(now time.Time) Decision {
	if p.single || !p.set.Enabled || !p.streak || p.probe != 0 {
		return Decision{}
	}
	due, cause := p.triggerDue()
	if now.Before(due) {
		return Decision{}
	}
	if now.Before(p.dwellUntil) {
		if !p.deferNoted {
			p.deferNoted = true
			p.observe(Observation{Kind: TriggerDeferred, At: now, Endpoint: p.active, Level: p.last, Cause: cause, Until: p.dwellUntil})
		}
		return Decision{}
	}
	return p.askProbe(now, cause)
}

// triggerDue returns when the pending trigger of the streak fires: an
// urgent one when raised, else the window, re-armed after each probe.
func (p *Policy) triggerDue() (time.Time, Cause) {
	if p.urgent != CauseNone {
		return p.urgentAt, p.urgent
	}
	due := p.streakSince.Add(p.set.DegradedWindow)
	if p.rearmAt.After(due) {
		due = p.rearmAt
	}
	return due, CauseDegradedWindow
}

func (p *Policy) raise(now time.Time, c Cause) {
	if p.urgent == CauseNone {
		p.urgent = c
		p.urgentAt = now
	}
}

func (p *Policy) askProbe(now time.Time, cause Cause) Decision {
	p.probeSeq++
	p.probe = p.probeSeq
	p.probeCause = cause
	p.probeStreak = p.streakSeq
	p.urgent = CauseNone
	p.deferNoted = false
	p.observe(Observation{Kind: ProbeAsked, At: now, Endpoint: p.active.Other(), Level: p.last, Probe: p.probe, Cause: cause})
	return Decision{
		Action:      ActionProbe,
		Cause:       cause,
		From:        p.active,
		To:          p.active.Other(),
		ActiveLevel: p.last,
		PeerLevel:   p.standby,
		DegradedFor: p.degradedFor(now),
		Probe:       p.probe,
	}
}

func (p *Policy) switchTo(now time.Time, cause Cause, peer Level) Decision {
	from := p.active
	d := Decision{
		Action:         ActionSwitch,
		Cause:          cause,
		From:           from,
		To:             from.Other(),
		ActiveLevel:    p.last,
		PeerLevel:      peer,
		DegradedFor:    p.degradedFor(now),
		DialTimeout:    p.set.ConnectTimeout,
		Attempt:        1,
		FailedAttempts: p.failed,
	}
	p.endStreak(now, CauseSessionEnded)
	if cause.ServiceLevel() {
		p.dwellUntil = now.Add(p.set.MinDwell)
	}
	p.active = from.Other()
	p.conn = connConnecting
	p.failed = 0
	p.probe = 0
	p.blipUntil = time.Time{}
	p.resetSession()
	// The old standby's level now belongs to the active; the new standby
	// (the endpoint just left) reports its own once its session is up.
	p.standby = Unknown()
	p.standbyBandSet = false
	return d
}

func (p *Policy) degradedFor(now time.Time) time.Duration {
	if !p.last.Unhealthy() || p.degradedSince.IsZero() {
		return 0
	}
	return now.Sub(p.degradedSince)
}

func (p *Policy) startStreak(now time.Time, l Level) {
	p.streak = true
	p.streakSince = now
	p.streakSeq++
	p.degradedSince = now
	p.observe(Observation{Kind: StreakStarted, At: now, Endpoint: p.active, Level: l})
}

// endStreak ends the degraded streak and everything armed by it: the
// shortcut is available again, and pending triggers are dropped because a
// trigger acts only while the streak that raised it lasts.
func (p *Policy) endStreak(now time.Time, cause Cause) {
	if p.streak {
		p.observe(Observation{Kind: StreakCleared, At: now, Endpoint: p.active, Level: p.last, Cause: cause})
	}
	p.streak = false
	p.shortcutUsed = false
	p.peerWanting = false
	p.urgent = CauseNone
	p.rearmAt = time.Time{}
	p.deferNoted = false
}

// resetSession forgets everything about the previous session: ServiceLevel
// judgements are per session.
func (p *Policy) resetSession() {
	p.last = Unknown()
	p.judged = false
	p.degradedSince = time.Time{}
	p.activeBandSet = false
	p.streak = false
	p.shortcutUsed = false
	p.peerWanting = false
	p.urgent = CauseNone
	p.rearmAt = time.Time{}
	p.deferNoted = false
	p.proven = false
	p.lostDegraded = false
}

func (p *Policy) noteActiveBand(now time.Time, l Level) {
	b := l.Band()
	if p.activeBandSet && b == p.activeBand {
		return
	}
	from := BandUnknown
	if p.activeBandSet {
		from = p.activeBand
	}
	p.activeBand, p.activeBandSet = b, true
	p.observe(Observation{Kind: ActiveBandChanged, At: now, Endpoint: p.active, Level: l, From: from, To: b})
}

func (p *Policy) setStandby(now time.Time, l Level) {
	p.standby = l
	b := l.Band()
	if p.standbyBandSet && b == p.standbyBand {
		return
	}
	from := BandUnknown
	if p.standbyBandSet {
		from = p.standbyBand
	}
	p.standbyBand, p.standbyBandSet = b, true
	p.observe(Observation{Kind: StandbyBandChanged, At: now, Endpoint: p.active.Other(), Level: l, From: from, To: b})
}

func (p *Policy) observe(o Observation) { p.obs = append(p.obs, o) }

func stayCause(peer Level) Cause {
	switch {
	case !peer.Known():
		return CausePeerUnknown
	case !peer.Healthy():
		return CausePeerNotHealthy
	default:
		return CausePeerNotHigher
	}
}

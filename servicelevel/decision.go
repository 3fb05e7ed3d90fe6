package servicelevel

import (
	"fmt"
	"strings"
	"time"
)

// Endpoint names one of the pair's two configured endpoints. The names
// are configuration positions, not server roles: the primary endpoint may
// well be the server that currently reports the standby level.
type Endpoint uint8

const (
	// Primary is the endpoint a pair connects to first.
	Primary Endpoint = iota
	// Backup is the other endpoint.
	Backup
)

// Other returns the endpoint that is not e.
func (e Endpoint) Other() Endpoint {
	if e == Primary {
		return Backup
	}
	return Primary
}

// String returns "primary" or "backup", as log lines name them.
func (e Endpoint) String() string {
	switch e {
	case Primary:
		return "primary"
	case Backup:
		return "backup"
	}
	return fmt.Sprintf("Endpoint(%d)", uint8(e))
}

// Action is what the supervisor must do now.
type Action uint8

const (
	// ActionNone: nothing to do. The Decision's Cause may still explain a
	// choice not to act (a probe answer that did not justify a switch).
	ActionNone Action = iota
	// ActionProbe: ask the standby endpoint (Decision.To) for its current
	// ServiceLevel and answer with Policy.ProbeResult, quoting
	// Decision.Probe. An unreachable standby is answered with Unknown().
	ActionProbe
	// ActionSwitch: make Decision.To the active endpoint now, promoting its
	// warm session (or, if it has none, connecting within
	// Decision.DialTimeout), then report Policy.SessionUp,
	// Policy.ConnectFailed or Policy.ConnectRefused.
	ActionSwitch
	// ActionConnect: connect the active endpoint (Decision.To) now, within
	// Decision.DialTimeout, then report Policy.SessionUp,
	// Policy.ConnectFailed or Policy.ConnectRefused.
	ActionConnect
)

var actionNames = [...]string{
	ActionNone:    "none",
	ActionProbe:   "probe",
	ActionSwitch:  "switch",
	ActionConnect: "connect",
}

// String returns the action's name, for example "switch".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Cause says why a decision or an observation happened, so that the
// supervisor's log line and user event can carry it.
type Cause uint8

const (
	// CauseNone: nothing to explain.
	CauseNone Cause = iota

	// Triggers of a probe and, when the peer is preferable, of a switch.

	// CauseDegradedWindow: the active level stayed below 200 for the
	// degraded window.
	CauseDegradedWindow
	// CauseMaintenance: the active reported ServiceLevel 0 (the shortcut
	// that skips the window).
	CauseMaintenance
	// CauseConnectPreference: the first known sample of a session was
	// below 200.
	CauseConnectPreference
	// CauseLostLinkDegraded: the active's link was lost after a level
	// below 200.
	CauseLostLinkDegraded
	// CauseStandbyHealthy: the standby's live level became Healthy and
	// higher than the active's after a trigger of the active's degraded
	// streak had found the standby wanting.
	CauseStandbyHealthy

	// Connectivity.

	// CauseStartup: the first connect of the pair.
	CauseStartup
	// CauseReconnect: a retry of the active endpoint after a lost link or a
	// failed attempt.
	CauseReconnect
	// CauseRetriesExhausted: the retry count of connect attempts failed;
	// the connectivity failover that predates ServiceLevel.
	CauseRetriesExhausted
	// CauseLinkLost: the active's link was lost (a retry follows).
	CauseLinkLost
	// CauseConnectFailed: a connect attempt failed, or a session was lost
	// before it delivered its first sample (a retry follows).
	CauseConnectFailed
	// CauseRefused: a connect attempt was refused (nothing listens on the
	// port: the server process is gone) while the standby was Healthy.
	CauseRefused

	// Reasons to stay after a probe.

	// CausePeerUnknown: the standby was unreachable or its level unknown.
	CausePeerUnknown
	// CausePeerNotHealthy: the standby's level is below 200.
	CausePeerNotHealthy
	// CausePeerNotHigher: the standby is Healthy but not higher than the
	// active.
	CausePeerNotHigher
	// CauseStreakBroken: the active recovered (or became unknown) while
	// the probe was out, so its answer no longer matters.
	CauseStreakBroken

	// Reasons a degraded streak ends.

	// CauseHealthySample: a sample of 200 or more.
	CauseHealthySample
	// CauseUnknownSample: an unreadable sample.
	CauseUnknownSample
	// CauseSessionEnded: the session was lost or left by a switch.
	CauseSessionEnded
)

var causeNames = [...]string{
	CauseNone:              "none",
	CauseDegradedWindow:    "degraded window",
	CauseMaintenance:       "ServiceLevel 0",
	CauseConnectPreference: "connect-time preference",
	CauseLostLinkDegraded:  "lost link after a degraded level",
	CauseStandbyHealthy:    "standby became Healthy",
	CauseStartup:           "startup",
	CauseReconnect:         "reconnect",
	CauseRetriesExhausted:  "connect retries exhausted",
	CauseLinkLost:          "link lost",
	CauseConnectFailed:     "connect failed",
	CauseRefused:           "connection refused",
	CausePeerUnknown:       "peer level unknown",
	CausePeerNotHealthy:    "peer not Healthy",
	CausePeerNotHigher:     "peer not higher",
	CauseStreakBroken:      "degraded streak ended",
	CauseHealthySample:     "Healthy sample",
	CauseUnknownSample:     "unknown sample",
	CauseSessionEnded:      "session ended",
}

// String returns a short phrase for log lines, for example "ServiceLevel 0".
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", uint8(c))
}

// ServiceLevel reports whether c is a ServiceLevel trigger, the kind of
// switch that starts the anti-flap dwell.
func (c Cause) ServiceLevel() bool {
	switch c {
	case CauseDegradedWindow, CauseMaintenance, CauseConnectPreference, CauseLostLinkDegraded, CauseStandbyHealthy:
		return true
	}
	return false
}

// ProbeID fences probe answers: an answer quoting an ID other than the one
// outstanding (a probe from before a switch or a lost link) is ignored. IDs
// start at 1.
type ProbeID uint64

// Decision is the Policy's answer to one event: at most one Action, the
// levels and cause that justify it, and the observations the event caused.
type Decision struct {
	Action Action
	// Cause is why the action was chosen or, for ActionNone after a probe
	// answer, why the connection stays.
	Cause Cause
	// From is the active endpoint when the decision was taken.
	From Endpoint
	// To is the endpoint acted on: the new active (switch), the standby
	// (probe) or the active (connect).
	To Endpoint
	// ActiveLevel is the last known level of the active's current (or, for
	// a lost link, last) session; Unknown if it never reported one.
	ActiveLevel Level
	// PeerLevel is the probe answer behind a switch or a stay, or the
	// standby's live level for a connectivity switch.
	PeerLevel Level
	// DegradedFor is how long the active level had been below 200, for
	// ServiceLevel causes.
	DegradedFor time.Duration
	// Probe is the ID to quote in ProbeResult (ActionProbe).
	Probe ProbeID
	// DialTimeout bounds the connect of ActionConnect, or of ActionSwitch
	// when the target has no live session to promote.
	DialTimeout time.Duration
	// Attempt numbers connect attempts on the target endpoint, from 1
	// (ActionConnect and ActionSwitch).
	Attempt int
	// FailedAttempts is how many connect attempts failed on From before a
	// CauseRetriesExhausted switch.
	FailedAttempts int
	// Observations are what the event changed that users may want to see,
	// in order; the supervisor turns them into events and log lines.
	Observations []Observation
}

// String renders the decision as a log line, for example "failover from
// primary to backup (ServiceLevel 0; backup reports 250)". ActionNone
// without a cause renders as "".
func (d Decision) String() string {
	switch d.Action {
	case ActionSwitch:
		return fmt.Sprintf("failover from %s to %s (%s; %s)", d.From, d.To, d.reason(), reports(d.To, d.PeerLevel))
	case ActionProbe:
		return fmt.Sprintf("probe %s (%s)", d.To, d.reason())
	case ActionConnect:
		return fmt.Sprintf("connect %s (%s, attempt %d, dial timeout %s)", d.To, d.Cause, d.Attempt, d.DialTimeout)
	}
	if d.Cause == CauseNone {
		return ""
	}
	return fmt.Sprintf("stay on %s (%s; %s)", d.From, d.Cause, reports(d.From.Other(), d.PeerLevel))
}

func (d Decision) reason() string {
	switch d.Cause {
	case CauseMaintenance:
		return "ServiceLevel 0"
	case CauseDegradedWindow:
		return fmt.Sprintf("ServiceLevel %s %s for %s", d.ActiveLevel, d.ActiveLevel.Band(), d.DegradedFor.Round(time.Second))
	case CauseConnectPreference:
		return fmt.Sprintf("connect-time preference, ServiceLevel %s", d.ActiveLevel)
	case CauseLostLinkDegraded:
		return fmt.Sprintf("lost link after ServiceLevel %s", d.ActiveLevel)
	case CauseStandbyHealthy:
		return fmt.Sprintf("standby became Healthy, active at ServiceLevel %s for %s", d.ActiveLevel, d.DegradedFor.Round(time.Millisecond))
	case CauseRetriesExhausted:
		return fmt.Sprintf("%d connect attempts failed", d.FailedAttempts)
	}
	return d.Cause.String()
}

func reports(e Endpoint, l Level) string {
	if !l.Known() {
		return e.String() + " level unknown"
	}
	return fmt.Sprintf("%s reports %s", e, l)
}

// ObservationKind says what an Observation is about.
type ObservationKind uint8

const (
	// ActiveBandChanged: the active's level moved to another band (From,
	// To, Level). The first sample of every session is reported, from
	// BandUnknown.
	ActiveBandChanged ObservationKind = iota + 1
	// StandbyBandChanged: the same for the standby's live level.
	StandbyBandChanged
	// StreakStarted: the active level went below 200 (Level).
	StreakStarted
	// StreakCleared: the degraded streak ended (Cause says why).
	StreakCleared
	// ProbeAsked: the standby is being asked (Probe, Cause).
	ProbeAsked
	// ProbeAnswered: the standby answered (Probe, Level).
	ProbeAnswered
	// TriggerDeferred: a ServiceLevel trigger (Cause) is held by the
	// anti-flap dwell until Until; it acts then if still valid.
	TriggerDeferred
	// RetryScheduled: connect attempt Attempt on the active will be made
	// at Until; Fast reports the short timing (the standby is Healthy, or
	// the lost link is still inside the blip window). Cause is
	// CauseLinkLost, CauseConnectFailed or CauseReconnect.
	RetryScheduled
)

var observationNames = [...]string{
	ActiveBandChanged:  "active band changed",
	StandbyBandChanged: "standby band changed",
	StreakStarted:      "degraded streak started",
	StreakCleared:      "degraded streak cleared",
	ProbeAsked:         "probe asked",
	ProbeAnswered:      "probe answered",
	TriggerDeferred:    "trigger deferred by dwell",
	RetryScheduled:     "retry scheduled",
}

// String returns the kind's name, for example "probe asked".
func (k ObservationKind) String() string {
	if k > 0 && int(k) < len(observationNames) {
		return observationNames[k]
	}
	return fmt.Sprintf("ObservationKind(%d)", uint8(k))
}

// Observation is a change inside the Policy worth a user event. Which
// fields are set depends on Kind (see the kinds).
type Observation struct {
	Kind ObservationKind
	// At is the time of the call that caused it.
	At time.Time
	// Endpoint is the endpoint the observation is about.
	Endpoint Endpoint
	// Level is the sample, the probe answer or the streak's level.
	Level Level
	// From and To are the bands of a band change.
	From, To Band
	// Cause is why a streak ended, what a probe or a held trigger is for,
	// or what a retry follows.
	Cause Cause
	// Probe is the probe asked or answered.
	Probe ProbeID
	// Attempt is the number of the scheduled connect attempt.
	Attempt int
	// Fast reports the short retry timing.
	Fast bool
	// Until is when a held trigger or a scheduled retry acts.
	Until time.Time
}

// String renders the observation as a log line.
func (o Observation) String() string {
	var b strings.Builder
	switch o.Kind {
	case ActiveBandChanged:
		fmt.Fprintf(&b, "%s (active) reports ServiceLevel %s (%s -> %s)", o.Endpoint, o.Level, o.From, o.To)
	case StandbyBandChanged:
		fmt.Fprintf(&b, "%s (standby) reports ServiceLevel %s (%s -> %s)", o.Endpoint, o.Level, o.From, o.To)
	case StreakStarted:
		fmt.Fprintf(&b, "%s reports ServiceLevel %s (%s, < %d): degraded streak started", o.Endpoint, o.Level, o.Level.Band(), HealthyMin)
	case StreakCleared:
		fmt.Fprintf(&b, "%s degraded streak cleared (%s)", o.Endpoint, o.Cause)
	case ProbeAsked:
		fmt.Fprintf(&b, "probing %s (probe %d, %s)", o.Endpoint, o.Probe, o.Cause)
	case ProbeAnswered:
		fmt.Fprintf(&b, "probe %d: %s", o.Probe, reports(o.Endpoint, o.Level))
	case TriggerDeferred:
		fmt.Fprintf(&b, "%s on %s held by the anti-flap dwell until %s", o.Cause, o.Endpoint, o.Until.Format(time.RFC3339Nano))
	case RetryScheduled:
		timing := "slow"
		if o.Fast {
			timing = "fast"
		}
		fmt.Fprintf(&b, "%s: connect attempt %d on %s at %s (%s retry)", o.Cause, o.Attempt, o.Endpoint, o.Until.Format(time.RFC3339Nano), timing)
	default:
		b.WriteString(o.Kind.String())
	}
	return b.String()
}

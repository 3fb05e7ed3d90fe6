package uaclient

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
)

// Role is what a session is for.
type Role uint8

const (
	// RoleActive: the session on the Policy's active endpoint, which
	// carries (or is being set up to carry) the data items.
	RoleActive Role = iota
	// RoleStandby: the session on the other endpoint, kept warm.
	RoleStandby
)

// String returns "active" or "standby".
func (r Role) String() string {
	switch r {
	case RoleActive:
		return "active"
	case RoleStandby:
		return "standby"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventLevelChanged: an endpoint's ServiceLevel moved to another band
	// (Endpoint, Role, Level, FromBand, ToBand). The first sample of every
	// session is reported, from BandUnknown.
	EventLevelChanged EventKind = iota + 1
	// EventLevelUnreadable: a session's ServiceLevel could not be read as
	// a Good Byte (Reason says why: a Bad status, no value, another type).
	// It counts as Unknown. Reported once per session and reason.
	EventLevelUnreadable
	// EventStreakStarted: the active's level went below 200 (Level).
	EventStreakStarted
	// EventStreakCleared: the degraded streak ended (Cause).
	EventStreakCleared
	// EventProbe: the standby is asked for its level (Probe, Cause).
	EventProbe
	// EventProbeAnswered: the standby answered (Probe, Level; Cause is
	// the probe's trigger).
	EventProbeAnswered
	// EventStay: a probe answer did not justify a switch (Cause:
	// CausePeerUnknown, CausePeerNotHealthy, CausePeerNotHigher or
	// CauseStreakBroken; Level is the active's, PeerLevel the standby's).
	EventStay
	// EventTriggerDeferred: a ServiceLevel trigger is held by the
	// anti-flap dwell until Until.
	EventTriggerDeferred
	// EventRetryScheduled: the next connect attempt on the active endpoint
	// is at Until (Attempt; Fast for the short timing).
	EventRetryScheduled
	// EventConnecting: a connect attempt starts (Endpoint, Role, Attempt).
	EventConnecting
	// EventConnectFailed: a connect attempt failed (Err).
	EventConnectFailed
	// EventSessionUp: a session is up. For the active it means the data
	// items report: the promotion or connect is complete (Cause says why
	// it happened, Duration how long it took).
	EventSessionUp
	// EventSessionLost: a session ended (Err says why: a socket error, a
	// heartbeat gap, a read past its deadline, a service fault).
	EventSessionLost
	// EventFailover: the active endpoint moves from Endpoint to Target
	// (Cause, Level: the old active's last known level, PeerLevel: the
	// target's). The promotion follows; EventSessionUp reports its end.
	EventFailover
	// EventItemFailed: a server rejected a data item (Handle, Err) while a
	// session was set up.
	EventItemFailed
	// EventNotificationsLost: notification messages of a subscription
	// (Subscription, the server's ID) never arrived and the server could
	// not send them again (Missing: their sequence numbers; Err: the
	// Republish answer, such as Bad_MessageNotAvailable). The data
	// changes they carried are lost; delivery goes on after them, and the
	// event comes before the updates that follow the gap.
	EventNotificationsLost
	// EventLinkRecovered: the active's link was lost (an EventSessionLost
	// came first) and is back, and the server still had what the Pair
	// needed: the same session, activated on a new connection, or its
	// subscriptions, transferred to a new session (Transferred). The data
	// went on without a snapshot; Republished counts the data changes
	// asked for again because they had been sent into the broken
	// connection, and Duration is the time from the loss. Messages the
	// server could not give back are reported on their own
	// (EventNotificationsLost). A link that comes back to a server
	// without the session gets an EventSessionUp and a snapshot instead.
	EventLinkRecovered
	// EventSameServer: the sessions on both endpoints report one
	// ApplicationUri (ApplicationURI): the endpoints reach the same
	// server, and the pair has no standby (Reason says it all). The
	// session on the other endpoint is not counted as a standby from then
	// on (PairStatus.Redundancy, PairStatus.StandbyLevel). Logged as an
	// error, once: again only after a later session showed two servers.
	EventSameServer
	// EventRedundancyWarning: the servers do not describe themselves as
	// one redundant set (Reason; Endpoint is the one whose server the
	// warning is about): one reports RedundancySupport None, or a
	// ServerUriArray does not name the other server. The pair works on.
	// Logged as a warning, once while it holds
	// (PairStatus.Redundancy.Warnings).
	EventRedundancyWarning
	// EventPartnerFound: partner discovery found the backup endpoint
	// (Endpoint is the backup, URL the endpoint found, ApplicationURI the
	// partner's). The Pair runs as a pair from then on. Logged at Info,
	// once.
	EventPartnerFound
	// EventPartnerNotFound: partner discovery found no backup (Reason says
	// at which step; Endpoint is the primary, whose server was asked). The
	// Pair runs on as a single server and asks again later. Logged as a
	// warning, once while the reason holds (PairStatus.Partner.Problem).
	EventPartnerNotFound
	// EventTakeover: the first session on the endpoint of a predecessor's
	// handoff (WithTakeover) took its data subscription over
	// (Transferred: no snapshot; the server's held messages are asked for
	// again), or could not (Err is the server's reason: new subscriptions
	// and a snapshot follow, and what the server produced since the
	// predecessor's last stored message is lost). The fallback is logged
	// as a warning, once; both are counted in PairStatus.
	EventTakeover
)

var eventKindNames = [...]string{
	EventLevelChanged:      "level changed",
	EventLevelUnreadable:   "level unreadable",
	EventStreakStarted:     "degraded streak started",
	EventStreakCleared:     "degraded streak cleared",
	EventProbe:             "probe",
	EventProbeAnswered:     "probe answered",
	EventStay:              "stay",
	EventTriggerDeferred:   "trigger deferred",
	EventRetryScheduled:    "retry scheduled",
	EventConnecting:        "connecting",
	EventConnectFailed:     "connect failed",
	EventSessionUp:         "session up",
	EventSessionLost:       "session lost",
	EventFailover:          "failover",
	EventItemFailed:        "item failed",
	EventNotificationsLost: "notifications lost",
	EventLinkRecovered:     "link recovered",
	EventSameServer:        "same server",
	EventRedundancyWarning: "redundancy warning",
	EventPartnerFound:      "partner found",
	EventPartnerNotFound:   "partner not found",
	EventTakeover:          "successor takeover",
}

// String returns the kind's name, for example "failover".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something a Pair did or saw that a user may want to know about.
// Which fields are set depends on Kind (see the kinds); Message is always
// set and is the text of the Pair's log line for the event.
type Event struct {
	Kind     EventKind             // what happened
	At       time.Time             // when the Pair saw it
	Endpoint servicelevel.Endpoint // the endpoint it is about (for a failover: the one left)
	URL      string                // Endpoint's URL
	Role     Role                  // the endpoint's role when it happened
	// Target is the new active endpoint of an EventFailover.
	Target servicelevel.Endpoint
	// Level is the sample, the probe answer or the old active's level.
	Level servicelevel.Level
	// PeerLevel is the other endpoint's level where it matters.
	PeerLevel servicelevel.Level
	// FromBand and ToBand are the bands of an EventLevelChanged.
	FromBand, ToBand servicelevel.Band
	// Cause is why: a failover's trigger, a streak's end, a stay's reason,
	// a retry's or a promotion's reason.
	Cause servicelevel.Cause
	// Probe is the probe asked or answered.
	Probe servicelevel.ProbeID
	// Attempt numbers connect attempts on the endpoint, from 1 (0 for the
	// standby's own reconnects); for a failover, the failed attempts.
	Attempt int
	// Fast reports the short retry timing of an EventRetryScheduled.
	Fast bool
	// Until is when a held trigger or a scheduled retry acts.
	Until time.Time
	// Duration is how long a promotion took, from the decision.
	Duration time.Duration
	// Handle is the item of an EventItemFailed.
	Handle uint32
	// Reason says why a level is unreadable, or what an EventSameServer,
	// EventRedundancyWarning or EventPartnerNotFound found.
	Reason string
	// ApplicationURI is the ApplicationUri both endpoints' servers
	// report, for an EventSameServer; the partner's, for an
	// EventPartnerFound.
	ApplicationURI string
	// Subscription is the server's ID of the subscription of an
	// EventNotificationsLost.
	Subscription uint32
	// Missing are the sequence numbers of the notification messages of an
	// EventNotificationsLost.
	Missing []uint32
	// Republished is the number of data changes an EventLinkRecovered
	// asked the server for again.
	Republished int
	// Transferred reports an EventLinkRecovered whose subscriptions moved
	// to a new session, or an EventTakeover that took the predecessor's
	// data subscription over.
	Transferred bool
	// Err is the error behind a failure.
	Err error
	// Message is the event as one line of text, as logged.
	Message string
}

// String returns the event's Message.
func (e Event) String() string { return e.Message }

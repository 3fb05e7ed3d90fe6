package uaclient

import (
	"errors"
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"
	"time"

	"github.com/gopcua/opcua/ua"
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
	// Reason says why a level is unreadable.
	Reason string
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
	// to a new session.
	Transferred bool
	// Err is the error behind a failure.
	Err error
	// Message is the event as one line of text, as logged.
	Message string
}

// String returns the event's Message.
func (e Event) String() string { return e.Message }

// UpdateKind says what an Update carries.
type UpdateKind uint8

const (
	// UpdateData is a data change of one item (Handle, Value).
	UpdateData UpdateKind = iota + 1
	// UpdateRefreshStart opens a snapshot: the data path has been
	// (re)established on Endpoint, and the current value of every item
	// follows. Cause is CauseStartup, CauseReconnect or the failover's
	// cause; Items is how many values follow.
	UpdateRefreshStart
	// UpdateRefreshValue is the current value of one item inside a
	// snapshot (Handle, Value). An item the server rejected carries the
	// rejection as its Value.Status.
	UpdateRefreshValue
	// UpdateRefreshEnd closes the snapshot: every item has been given.
	// Consumers reconcile here (an item they hold that was not in the
	// snapshot is gone). A refresh start followed by another refresh
	// start, with no end between, was cut short (the new server was lost
	// mid-snapshot): reconcile at the later snapshot's end only.
	UpdateRefreshEnd
)

var updateKindNames = [...]string{
	UpdateData:         "data",
	UpdateRefreshStart: "refresh start",
	UpdateRefreshValue: "refresh value",
	UpdateRefreshEnd:   "refresh end",
}

// String returns the kind's name.
func (k UpdateKind) String() string {
	if k > 0 && int(k) < len(updateKindNames) {
		return updateKindNames[k]
	}
	return fmt.Sprintf("UpdateKind(%d)", uint8(k))
}

// Update is one piece of the Pair's output: a data change, or part of the
// snapshot framing a promotion. Updates are delivered in order, on one
// goroutine of the Pair.
type Update struct {
	// Kind says what the update carries.
	Kind UpdateKind
	// Epoch numbers snapshots from 1. Data changes carry the epoch of the
	// snapshot they follow.
	Epoch uint64
	// Endpoint is the server the value came from.
	Endpoint servicelevel.Endpoint
	// Handle is the item's client handle (data and refresh values).
	Handle uint32
	// Value is the value with its status and source and server timestamps
	// (data and refresh values). The Pair does not keep it.
	Value *ua.DataValue
	// Cause is why the snapshot was taken (refresh start).
	Cause servicelevel.Cause
	// Items is the number of refresh values that follow (refresh start).
	Items int
	// Received is when the Pair received the value, or when the snapshot
	// began.
	Received time.Time
}

// Item is a data item to monitor, keyed by its client handle.
type Item struct {
	// Handle is the client handle the item's updates carry. Handles are
	// the user's to choose and must be unique within a Pair.
	Handle uint32
	// NodeID is the node whose Value is monitored, in the OPC UA string
	// form, for example "ns=1;s=Counter0000" or "i=2258".
	NodeID string
	// SamplingInterval overrides the configured sampling interval when
	// positive.
	SamplingInterval time.Duration
	// QueueSize overrides the configured queue size when positive.
	QueueSize uint32
	// DiscardOldest, when set, overrides the configured discardOldest.
	DiscardOldest *bool
	// Filter, when set, overrides the configured data-change filter.
	Filter *DataChangeFilter
}

// ItemResult is the outcome of adding one Item.
type ItemResult struct {
	// Handle is the item's handle.
	Handle uint32
	// Err is nil when the item was added. Otherwise it names the item and
	// why: a bad node ID, a duplicate handle, or the server's rejection
	// (then Status holds the server's code). An item with an error was not
	// added.
	Err error
	// Status is the server's answer for the item, ua.StatusOK when it was
	// created. It is ua.StatusBadWaitingForInitialData when no session
	// carries the data right now: the item is added and will be created
	// (and appear in the snapshot) as soon as one does.
	Status ua.StatusCode
}

// Errors of the Pair. Use errors.Is: the returned errors wrap them with
// details.
var (
	// ErrClosed: the Pair was closed.
	ErrClosed = errors.New("servicelevel: pair closed")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("servicelevel: pair already started")
	// ErrNotStarted: the call needs a started Pair.
	ErrNotStarted = errors.New("servicelevel: pair not started")
	// ErrUnknownHandle: no item has the handle.
	ErrUnknownHandle = errors.New("servicelevel: unknown item handle")
	// ErrWriteRefused: the write was not sent (see WriteRefusedError). It
	// is always one of the two below as well.
	ErrWriteRefused = errors.New("servicelevel: write refused")
	// ErrNoSession: the write was refused because no session carries the
	// data right now (before the first connect, between sessions, during a
	// switch).
	ErrNoSession = errors.New("servicelevel: no active session")
	// ErrNotHealthy: the write was refused because the active server's
	// current ServiceLevel is not Healthy (below 200, or unreadable).
	ErrNotHealthy = errors.New("servicelevel: active server not Healthy")
)

// WriteRefusedError is returned by Write when the active endpoint is not
// known to be Healthy: a write goes only to a server whose current
// ServiceLevel is 200 or more, never to a standby, a degraded server or
// one in maintenance, and never during a switch. errors.Is(err,
// ErrWriteRefused) reports it, and errors.Is with ErrNoSession or
// ErrNotHealthy tells the two cases apart.
type WriteRefusedError struct {
	Endpoint servicelevel.Endpoint // the active endpoint
	Level    servicelevel.Level    // its current level
	// Err is ErrNoSession or ErrNotHealthy.
	Err    error
	Reason string // the refusal in words
}

// Error renders "servicelevel: write refused: <reason>".
func (e *WriteRefusedError) Error() string {
	return "servicelevel: write refused: " + e.Reason
}

// Is makes errors.Is(err, ErrWriteRefused) true.
func (e *WriteRefusedError) Is(target error) bool { return target == ErrWriteRefused }

// Unwrap returns Err.
func (e *WriteRefusedError) Unwrap() error { return e.Err }

// SessionState is where one endpoint's session is.
type SessionState uint8

const (
	// SessionDown: no session and no attempt in flight.
	SessionDown SessionState = iota
	// SessionConnecting: a connect attempt is in flight.
	SessionConnecting
	// SessionUp: the session is up (for the active: maybe still being
	// promoted; see PairStatus.Connected).
	SessionUp
)

// String returns "down", "connecting" or "up".
func (s SessionState) String() string {
	switch s {
	case SessionDown:
		return "down"
	case SessionConnecting:
		return "connecting"
	case SessionUp:
		return "up"
	}
	return fmt.Sprintf("SessionState(%d)", uint8(s))
}

// PairStatus is a snapshot of a Pair.
type PairStatus struct {
	// Active is the endpoint that carries, or is being set up to carry,
	// the data (the Policy's active).
	Active    servicelevel.Endpoint
	ActiveURL string // Active's URL
	// Connected reports that the active's session is up and its items
	// report: data flows.
	Connected bool
	// Switching reports a promotion or connect in flight.
	Switching bool
	// ActiveLevel is the active session's latest ServiceLevel sample
	// (Unknown when unreadable or without a session), ActiveBand its band.
	ActiveLevel servicelevel.Level
	ActiveBand  servicelevel.Band // ActiveLevel's band
	// StandbyLevel is the standby session's latest sample.
	StandbyLevel servicelevel.Level
	// Sessions are the session states, indexed by Endpoint.
	Sessions [2]SessionState
	// Items is the number of data items.
	Items int
	// Failovers counts the switches decided since Start.
	Failovers int
	// Recoveries counts link blips recovered without a new snapshot
	// (EventLinkRecovered), Republished the data changes they asked the
	// server for again.
	Recoveries  int
	Republished uint64
	// Link are the active session's session and subscription parameters
	// as its server revised them, and the longest blip they let recover.
	Link LinkParams
	// Policy is the failover Policy's own view.
	Policy servicelevel.Status
	// LastErr is the last connect or session error, nil before any: what
	// a pair that carries no data is up against.
	LastErr error
}

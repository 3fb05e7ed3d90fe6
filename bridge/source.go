package bridge

import (
	"context"
	"errors"
	"time"

	"github.com/apbridge/apbridge/wire"
)

// Tag is a tag as the bridge asks a source for it.
type Tag struct {
	// Name is the tag's configured name, unique within its source.
	Name string
	// Address is where the source finds it: an OPC UA node ID, a gateway
	// item address.
	Address string
	// Handle is the bridge's key for the tag in updates; unique within the
	// source and stable for the source's lifetime.
	Handle uint32
}

// Source is a tag source: what the bridge needs of an OPC UA server pair, a
// gateway or a simulation. Implementations must be safe for concurrent
// use. Subscribe is called by the bridge's subscribe guard, at most once at
// a time per source connection.
type Source interface {
	// Name identifies the source in subjects, logs and status.
	Name() string
	// Start starts the source, which connects in the background and
	// delivers to h, and returns at once: it never waits for a server
	// (the source connects, and retries, on its own schedule) and reports
	// its state through h.HealthChanged. ctx bounds Start only and ends
	// when the bridge is closed; the source runs until Close, which may
	// also come while Start runs, or before it. h's methods are called
	// from one goroutine at a time, in the order of events.
	// docs/sources.md states the contract; package sourcetest checks it.
	Start(ctx context.Context, h Handler) error
	// Subscribe adds tags and returns one error per tag, nil for a tag
	// now subscribed. It returns an error of its own when the request as a
	// whole failed (the source is down, ctx ended): no tag is subscribed
	// then. Tags already subscribed must be accepted again without
	// duplicating them.
	Subscribe(ctx context.Context, tags []Tag) ([]error, error)
	// Unsubscribe removes tags.
	Unsubscribe(ctx context.Context, tags []Tag) error
	// Write writes v to tag and returns the source's status for the write.
	// A source refuses a write it cannot make safely (not connected, not
	// the primary server) with an error.
	Write(ctx context.Context, tag Tag, v any) (wire.StatusCode, error)
	// Health returns the source's state now.
	Health() Health
	// Close stops the source and waits for its goroutines.
	Close() error
}

// LinkReporter is implemented by a source that can ride out a broken link
// without a new session (an OPC UA session activated on a new secure
// channel, a gateway's event stream resumed after its last event): what
// the server produced meanwhile is asked for again instead of lost. The
// bridge adds the counts to the source's stats, so that a recovered blip
// is told apart from a new session (a refresh).
type LinkReporter interface {
	// LinkRecoveries returns how many lost links were ridden out on the
	// same session, and how many notifications were asked for again in
	// them (0 when the source cannot count them).
	LinkRecoveries() (recovered, republished uint64)
}

// SuccessorReporter is implemented by a source that can take over what its
// predecessor (the same relay before a restart) left on the server: an
// OPC UA data subscription transferred to the new session, its held
// messages asked for again, without a refresh. The bridge adds the counts
// to the source's stats.
type SuccessorReporter interface {
	// SuccessorTakeovers returns how many of the predecessor's
	// subscriptions were taken over, and how many takeovers failed and
	// fell back to new subscriptions with a refresh.
	SuccessorTakeovers() (transferred, fallbacks uint64)
}

// ReplyBounder is implemented by a source that knows how long its
// Subscribe can take when the server is slow but alive (a gateway's
// command deadline). The source's guard then presumes a reply lost no
// sooner than that: a request presumed lost while the server still works
// on it would queue a second one behind it.
type ReplyBounder interface {
	// SubscribeReplyBound returns the longest a Subscribe takes before
	// the source itself gives up.
	SubscribeReplyBound() time.Duration
}

// Handler receives what a source reports. The bridge implements it.
type Handler interface {
	// Update reports a change of the tag with the given handle. The
	// update's Tag and Seq are filled in by the bridge.
	Update(handle uint32, u wire.Update)
	// RefreshStart and RefreshEnd frame a snapshot: the current value of
	// every tag, sent by a source after it switched servers, so that
	// consumers can reconcile.
	RefreshStart(reason string)
	RefreshEnd()
	// HealthChanged reports a change of the source's state.
	HealthChanged(h Health)
	// Restored reports that the source's connection was re-established
	// and its subscriptions were lost: the bridge subscribes every tag
	// again (through its guard).
	Restored()
}

// StoreNotifier is implemented by the bridge's Handler: a source that can
// leave what it received with its server until it is stored (an OPC UA
// subscription keeps each message until it is acknowledged) asks to hear
// when that is. A wrapper of the Handler that does not forward it makes
// the source acknowledge on receipt, as without it.
type StoreNotifier interface {
	// AfterStored calls f once every update the source handed to Update
	// before the call is stored by the sink (its Flush returned: the core
	// sink's broker confirmation, the JetStream sink's acknowledgement
	// by the stream, or an update the sink gave up on, which it logged
	// and counted). It never blocks; f runs on a goroutine of the
	// bridge, never the source's, and not at all if the source is
	// stopped or removed first.
	AfterStored(f func())
}

// State is a source's connection state.
type State string

const (
	StateConnecting State = "connecting"
	StateConnected  State = "connected"
	StateDegraded   State = "degraded" // connected, but to a server that is not Healthy, or without a standby
	StateDown       State = "down"
	StateClosed     State = "closed"
	// StateNotOwned: the source runs no session here by design, because
	// another relay of a fleet owns it. It counts as ready.
	StateNotOwned State = "not-owned"
)

// Health describes a source.
type Health struct {
	State State `json:"state"`
	// Endpoint is the server the source reads from now.
	Endpoint string `json:"endpoint,omitempty"`
	// Level is that server's ServiceLevel (OPC UA), -1 if unknown.
	Level int `json:"level"`
	// Writable reports whether a write would be accepted now (connected to
	// a Healthy primary).
	Writable bool `json:"writable"`
	// LastSwitch describes the source's last failover, if any.
	LastSwitch string    `json:"lastSwitch,omitempty"`
	LastAt     time.Time `json:"lastSwitchAt,omitzero"`
	// LastSwitchCause is the last failover's cause, one of a few words
	// (e.g. "ServiceLevel 0", "gateway unreachable"), for metric labels.
	LastSwitchCause string `json:"lastSwitchCause,omitempty"`
	// LastSwitchTook is how long the last failover took.
	LastSwitchTook time.Duration `json:"-"`
	Detail         string        `json:"detail,omitempty"`
}

// ErrReadOnly is returned by Write for a tag that is not configured as
// writable.
var ErrReadOnly = errors.New("tag is read-only")

// ErrNotWritableNow is returned by sources that refuse a write because the
// server they are on may not be written (not connected, or a standby).
var ErrNotWritableNow = errors.New("source is not connected to a writable primary")

package servicelevel

import (
	"fmt"
	"time"
)

// The levels a server publishes through Calculate (the tiers of OtOpcUa's
// redundancy design). They are spaced so that a client comparing two
// servers prefers, in order, a healthy primary, a healthy follower, a
// server with stale data and a server that has lost its config store as
// well, and never uses one that is leaving or detached.
const (
	// TierDown: the node is not an Up or Joining cluster member, or it has
	// no driver role. It is in the Maintenance band, so clients leave it at
	// once.
	TierDown uint8 = 0
	// TierCriticallyDegraded: the config store is unreachable and the data
	// is stale.
	TierCriticallyDegraded uint8 = 100
	// TierStale: the data is stale (or a peer recently failed to reach this
	// node's endpoint) but the config store is reachable. It is the lowest
	// Healthy level, so a connected client stays while a connecting one
	// prefers a fully healthy peer.
	TierStale uint8 = 200
	// TierHealthyFollower: everything is fine and the node is not the
	// driver primary.
	TierHealthyFollower uint8 = 240
	// TierHealthyPrimary: everything is fine and the node is the driver
	// primary; the +10 over a follower keeps "pick the highest" clients on
	// the primary.
	TierHealthyPrimary uint8 = 250
)

// MemberState is the node's own cluster membership status. The zero value
// is MemberUnknown, which publishes TierDown: a node that has not learnt
// its membership yet must not advertise itself as usable.
type MemberState uint8

const (
	// MemberUnknown: the status has not been observed.
	MemberUnknown MemberState = iota
	// MemberJoining: joining the cluster; counts as a member.
	MemberJoining
	// MemberWeaklyUp: reachable by part of the cluster only; not Up.
	MemberWeaklyUp
	// MemberUp: a full member.
	MemberUp
	// MemberLeaving: leaving gracefully.
	MemberLeaving
	// MemberExiting: handing over before it is removed.
	MemberExiting
	// MemberDown: marked down by the cluster.
	MemberDown
	// MemberRemoved: no longer a member.
	MemberRemoved
)

var memberStateNames = [...]string{
	MemberUnknown:  "Unknown",
	MemberJoining:  "Joining",
	MemberWeaklyUp: "WeaklyUp",
	MemberUp:       "Up",
	MemberLeaving:  "Leaving",
	MemberExiting:  "Exiting",
	MemberDown:     "Down",
	MemberRemoved:  "Removed",
}

// String returns the state's name, for example "Up".
func (m MemberState) String() string {
	if int(m) < len(memberStateNames) {
		return memberStateNames[m]
	}
	return fmt.Sprintf("MemberState(%d)", uint8(m))
}

// NodeHealth is everything a redundant server's ServiceLevel depends on,
// already reduced to booleans. Each field's zero value is the pessimistic
// reading except PeerProbeFailed, whose zero value gives the benefit of the
// doubt exactly as OtOpcUa's design does: only a recent, actively observed
// failure demotes.
type NodeHealth struct {
	// Member is the node's own membership status.
	Member MemberState
	// DriverRole reports whether the node serves data at all; a node
	// without it is Detached.
	DriverRole bool
	// ConfigStoreReachable reports whether the node's config store (the Config
	// DB of OtOpcUa's design) answered its last health check. A node whose
	// store is local and in-process passes true.
	ConfigStoreReachable bool
	// Stale reports whether the node's view of its data or of the cluster is
	// too old to serve as current. An unreachable config store implies stale
	// whatever this field says (OtOpcUa's design derives Stale that way).
	Stale bool
	// PeerProbeFailed reports that a peer recently tried and failed to
	// reach this node's OPC UA endpoint.
	PeerProbeFailed bool
	// Primary reports whether the node is the pair's driver primary.
	Primary bool
}

// Calculate returns the ServiceLevel a redundant server publishes for h,
// the truth table of OtOpcUa's redundancy design, evaluated top to bottom:
//
//	0    Member is not Up or Joining, or no driver role (Detached)
//	100  config store unreachable (so stale as well)
//	200  stale, config store reachable
//	200  fresh, config store reachable, a peer recently failed to reach us
//	240  fresh, config store reachable, probe ok, not the primary
//	250  the same, and the driver primary
//
// The fourth row is ours; that design leaves the case open. A failed peer
// probe is a peer's view of our network reachability, contradicted by any
// client that is connected and reading this value, and the data is fresh.
// So the node stays Healthy (a connected client never leaves it) but drops
// to the bottom of the band, below a fully healthy peer, so that a client
// choosing between the two prefers the peer. The primary loses its +10 for
// the same reason: it is no longer known to be reachable by everyone.
func Calculate(h NodeHealth) uint8 {
	switch {
	case h.Member != MemberUp && h.Member != MemberJoining, !h.DriverRole:
		return TierDown
	case !h.ConfigStoreReachable:
		return TierCriticallyDegraded
	case h.Stale, h.PeerProbeFailed:
		return TierStale
	case h.Primary:
		return TierHealthyPrimary
	default:
		return TierHealthyFollower
	}
}

// DefaultFreshness is how old a health observation may be before it stops
// counting, as in OtOpcUa's design (30 s): a node whose config-store check or
// cluster snapshot is older than this serves stale data, and a peer probe
// result older than this is forgotten.
const DefaultFreshness = 30 * time.Second

// Observations are the timestamped facts a server collects, from which
// Calculator derives NodeHealth. They exist so that every server built on
// this package derives Stale the same way instead of each inventing its
// own ageing rules.
type Observations struct {
	// Member is the node's own membership status.
	Member MemberState
	// DriverRole reports whether the node serves data at all.
	DriverRole bool
	// Primary reports whether the last role snapshot named this node the
	// driver primary.
	Primary bool
	// RoleSnapshotAt is when the last role snapshot arrived. The zero time
	// (never) is stale.
	RoleSnapshotAt time.Time

	// ConfigStoreLocal marks a node whose config store is in-process (the
	// DB-less driver node of OtOpcUa's design): it is always reachable and its
	// check never ages, so only the role snapshot can make the node stale.
	ConfigStoreLocal bool
	// ConfigStoreReachable is the result of the last config-store check.
	ConfigStoreReachable bool
	// ConfigStoreCheckedAt is when that check completed. The zero time
	// (never) is stale.
	ConfigStoreCheckedAt time.Time

	// PeerProbeOK is the result of the last probe of this node's endpoint
	// by a peer.
	PeerProbeOK bool
	// PeerProbeAt is when that result arrived. The zero time means no
	// result, which like an old one gives the benefit of the doubt: a
	// single node, or one whose peer has left, never demotes itself.
	PeerProbeAt time.Time
}

// Calculator derives a server's ServiceLevel from Observations. The zero
// value uses DefaultFreshness.
type Calculator struct {
	// Freshness overrides DefaultFreshness when positive.
	Freshness time.Duration
}

func (c Calculator) freshness() time.Duration {
	if c.Freshness > 0 {
		return c.Freshness
	}
	return DefaultFreshness
}

// Health reduces o to NodeHealth at time now. Stale is derived as in OtOpcUa's
// design: the config store is unreachable, or its last check or the last role
// snapshot is older than the freshness limit. A peer probe counts only if it
// failed within the freshness limit.
func (c Calculator) Health(o Observations, now time.Time) NodeHealth {
	fresh := c.freshness()
	old := func(at time.Time) bool { return at.IsZero() || now.Sub(at) > fresh }

	reachable := o.ConfigStoreLocal || o.ConfigStoreReachable
	stale := !reachable || old(o.RoleSnapshotAt)
	if !o.ConfigStoreLocal {
		stale = stale || old(o.ConfigStoreCheckedAt)
	}
	return NodeHealth{
		Member:               o.Member,
		DriverRole:           o.DriverRole,
		ConfigStoreReachable: reachable,
		Stale:                stale,
		PeerProbeFailed:      !o.PeerProbeOK && !old(o.PeerProbeAt),
		Primary:              o.Primary,
	}
}

// Calculate returns the ServiceLevel for o at time now.
func (c Calculator) Calculate(o Observations, now time.Time) uint8 {
	return Calculate(c.Health(o, now))
}

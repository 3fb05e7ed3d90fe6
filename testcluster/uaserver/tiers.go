package uaserver

// The levels Tiers publishes (the tiers of OtOpcUa's redundancy design).
// They are spaced so that a client comparing two servers prefers, in
// order, a healthy primary, a healthy follower, a server with stale data
// and a server that has lost its configuration store as well, and never
// uses one that has left its redundancy group.
const (
	// TierDown: the node is not an Up (or Joining) member of its
	// redundancy group. It is in the Maintenance band, so clients leave it
	// at once.
	TierDown = LevelMaintenance
	// TierCriticallyDegraded: the configuration store is unreachable, so
	// the data is stale as well.
	TierCriticallyDegraded byte = 100
	// TierStale: the data is stale (or the peer's probe of this server
	// failed) but the configuration store is reachable. It is the lowest
	// Healthy level, so a connected client stays while a connecting one
	// prefers a fully healthy peer.
	TierStale = healthyLevel
	// TierHealthyFollower: everything is fine and the node is not the
	// primary.
	TierHealthyFollower = LevelHealthyFollower
	// TierHealthyPrimary: everything is fine and the node is the primary;
	// the +10 over a follower keeps "pick the highest" clients on the
	// primary.
	TierHealthyPrimary = LevelPrimary
)

// Tiers is the LevelFunc of a redundant server that follows OtOpcUa's
// redundancy design: the ServiceLevel it publishes for h, from the truth
// table of that design, evaluated top to bottom:
//
//	0    not an Up (or Joining) member of its redundancy group
//	100  configuration store unreachable (so stale as well)
//	200  stale, configuration store reachable
//	200  fresh, configuration store reachable, the peer's probe failed
//	240  fresh, configuration store reachable, probe ok, not the primary
//	250  the same, and the primary
//
// The fourth row is ours; that design leaves the case open. A failed peer
// probe is a peer's view of our network reachability, contradicted by any
// client that is connected and reading this value, and the data is fresh.
// So the server stays Healthy (a connected client never leaves it) but
// drops to the bottom of the band, below a fully healthy peer, so that a
// client choosing between the two prefers the peer. The primary loses its
// +10 for the same reason: it is no longer known to be reachable by
// everyone.
//
// Warm mode is not in this table: that design defines tiers only for the
// non-Warm case, and a Warm standby's levels (90, or 1 then 50 while it
// boots) are scripted with Demote and Boot instead.
func Tiers(h Health) byte {
	switch {
	case !h.MemberUp:
		return TierDown
	case !h.StoreReachable:
		return TierCriticallyDegraded
	case h.Stale, !h.PeerProbeOK:
		return TierStale
	case h.Primary:
		return TierHealthyPrimary
	default:
		return TierHealthyFollower
	}
}

package uaclient

import (
	"fmt"
	"math"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
)

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
	// StandbyLevel is the standby session's latest sample; Unknown while
	// Redundancy.SameServer, since that session is no standby.
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
	// SuccessorTransfers counts the predecessor's data subscriptions
	// taken over at start (WithTakeover, EventTakeover), and
	// SuccessorFallbacks the takeovers that failed: new subscriptions
	// and a snapshot instead.
	SuccessorTransfers int
	SuccessorFallbacks int
	// Link are the active session's session and subscription parameters
	// as its server revised them, and the longest blip they let recover.
	Link LinkParams
	// Policy is the failover Policy's own view.
	Policy servicelevel.Status
	// Servers are what each endpoint's server said of itself at its
	// latest session, indexed by Endpoint; zero before its first session,
	// and always for a single server, which is not checked (one with
	// DiscoverPartner is: its server names the partner).
	Servers [2]ServerInfo
	// Redundancy is the check of the pair against what its servers say:
	// both endpoints on one server (an error: no standby), or servers
	// that do not describe themselves as one redundant set (warnings).
	Redundancy RedundancyCheck
	// Partner is the partner discovery of a Pair configured with one
	// endpoint and DiscoverPartner: the backup found, or why none was.
	Partner PartnerStatus
	// LastErr is the last connect or session error, nil before any: what
	// a pair that carries no data is up against.
	LastErr error
}

// PartnerStatus is where partner discovery stands (PairConfig.DiscoverPartner).
type PartnerStatus struct {
	// Enabled reports DiscoverPartner: the rest is zero without it.
	Enabled bool
	// URL is the backup endpoint found, "" while none is; ApplicationURI
	// the partner's ApplicationUri. A partner found is the backup for the
	// Pair's life.
	URL            string
	ApplicationURI string
	// Problem says which step of the last discovery found nothing, while
	// no partner is known: no partner named, FindServers does not know
	// it, no endpoint matches the security settings, the endpoint reaches
	// the configured server itself. "" before the first discovery ends
	// and once a partner is found.
	Problem string
	// Attempts counts the discoveries started; At is when the last one
	// ended.
	Attempts int
	At       time.Time
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

// resumeMargin is the part of the session timeout beyond the blip
// tolerance: the time to notice a frozen link (the heartbeat gap) and to
// get through the Policy's retry and the reconnect after the link is back.
const resumeMargin = 10 * time.Second

// minSessionTimeout is the session timeout asked for at least: a short
// tolerance must not make a session that a slow server expires.
const minSessionTimeout = 30 * time.Second

// sessionTimeout is the session timeout the Pair asks for.
func (set *PairSettings) sessionTimeout() time.Duration {
	return max(minSessionTimeout, set.BlipTolerance+resumeMargin)
}

// lifetimeCount is the lifetime count asked for a subscription publishing
// every interval with a keep-alive every keepAlive intervals: at least
// three keep-alive periods (Part 4), a minute, and outlive, so that the
// subscription outlives the session (a transfer finds it).
func lifetimeCount(interval time.Duration, keepAlive uint32, outlive time.Duration) uint32 {
	interval = max(interval, time.Millisecond)
	n := max(3*int64(keepAlive), int64(time.Minute/interval), int64((outlive+interval-1)/interval))
	return uint32(min(n, math.MaxUint32))
}

// SubscriptionParams are a subscription's parameters as the server revised
// them.
type SubscriptionParams struct {
	Interval       time.Duration // the publishing interval
	LifetimeCount  uint32        // publishing intervals without a Publish request before it ends
	KeepAliveCount uint32        // publishing intervals between keep-alives
}

// Lifetime is how long the subscription outlives a client that sends no
// Publish request.
func (sp SubscriptionParams) Lifetime() time.Duration {
	return time.Duration(sp.LifetimeCount) * sp.Interval
}

// LinkParams are the parameters that decide how long a link blip may last
// without loss, as the server of the active session revised them.
type LinkParams struct {
	// SessionTimeout is the revised session timeout.
	SessionTimeout time.Duration
	// Health and Data are the health and data subscriptions.
	Health, Data SubscriptionParams
	// Recoverable is the longest blip these allow to cost nothing: the
	// shortest of the session timeout and the subscriptions' lifetimes,
	// less the margin for noticing the blip and reconnecting. Compare it
	// with PairSettings.BlipTolerance.
	Recoverable time.Duration
}

func (lp *LinkParams) settle() {
	lp.Recoverable = max(0, min(lp.SessionTimeout, lp.Health.Lifetime(), lp.Data.Lifetime())-resumeMargin)
}

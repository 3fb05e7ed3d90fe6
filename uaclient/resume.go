package uaclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// A link blip - the connection to a live server broken or frozen, then
// back - costs nothing when the server still has the session: OPC UA
// binds a session to its secure channel only until the client activates
// it on another one, and a subscription keeps the notification messages
// it sent until the client acknowledges them. So when the serving session
// loses its link, the Pair keeps what it needs to take the session over
// (a remnant); the next connect to the same endpoint opens a new secure
// channel, activates the old session on it, keeps the subscriptions, their
// monitored items and their sequencers, and the sequencers ask for what
// is missing (Republish). Only a server that no longer has the session
// costs a new one; its subscriptions are then transferred to the new
// session where the server still has them, and created anew otherwise
// (with a snapshot, as after any new session).

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

// resumeKind is how a session came up.
type resumeKind uint8

const (
	resumeNone        resumeKind = iota // a new session with new subscriptions
	resumeActivated                     // the old session, activated on a new channel
	resumeTransferred                   // a new session, the old subscriptions transferred to it
)

// remnant is what a serving session that lost its link leaves for the
// next session on its endpoint to take over. from's fields that were set
// before it came up are read-only; its loop-owned fields (the sequencers,
// the fence) pass to the loop's new session, and its worker's items to the
// new worker once from's goroutines have exited.
type remnant struct {
	from   *session
	sess   *opcua.Session // detached from from's client
	lostAt time.Time
	gone   atomic.Bool // the server no longer has the session
}

// keepRemnant keeps what the next session on s's endpoint needs to take s
// over, if s served the data and the Pair tolerates blips. The client's
// session is detached before the client closes, so that the close does
// not end it on the server.
func (p *Pair) keepRemnant(s *session, now time.Time) {
	if !s.serves() || p.set.BlipTolerance == 0 || s.conn.client == nil || s.conn.link.SessionTimeout == 0 {
		return
	}
	cs := s.conn.client.Session()
	if cs == nil {
		return
	}
	s.conn.keep.Store(true)
	p.remnants[s.ep] = &remnant{from: s, sess: cs, lostAt: now}
}

// usable reports whether r may still be taken over at now.
func (r *remnant) usable(now time.Time) bool {
	return r != nil && !r.gone.Load() && now.Sub(r.lostAt) < r.from.conn.link.SessionTimeout
}

// errSessionGone says that the server no longer has the session.
var errSessionGone = errors.New("the server no longer has the session")

// sessionGone reports whether err is a server's answer that the session
// does not exist (any more): closed, timed out, or never known.
func sessionGone(err error) bool {
	for _, code := range []ua.StatusCode{ua.StatusBadSessionIDInvalid, ua.StatusBadSessionClosed, ua.StatusBadSessionNotActivated} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// reattach opens a new secure channel on c and activates r's session on
// it. An error that wraps errSessionGone means the server answered that
// the session is gone; any other is a link or server fault, and r stays
// usable for the next attempt.
func (c *conn) reattach(ctx context.Context, cl *opcua.Client, r *remnant) error {
	select {
	case <-r.from.conn.exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := cl.Dial(ctx); err != nil {
		return err
	}
	if err := cl.ActivateSession(ctx, r.sess); err != nil {
		if sessionGone(err) {
			r.gone.Store(true)
			return fmt.Errorf("%w (%v)", errSessionGone, err)
		}
		return fmt.Errorf("activate the session on a new channel: %w", err)
	}
	c.takeOver(r, resumeActivated)
	return nil
}

// transfer moves r's subscriptions to the new session on c, where the
// server still has them. It reports whether both moved; one that moved
// alone is deleted, since the Pair needs both.
func (c *conn) transfer(ctx context.Context, cl *opcua.Client, r *remnant) bool {
	select {
	case <-r.from.conn.exited:
	case <-ctx.Done():
		return false
	}
	ids := []uint32{r.from.conn.healthSub, r.from.conn.dataSub}
	res, err := send[*ua.TransferSubscriptionsResponse](ctx, cl, &ua.TransferSubscriptionsRequest{SubscriptionIDs: ids})
	if err != nil || len(res.Results) != len(ids) {
		// Bad_ServiceUnsupported among others: new subscriptions follow.
		c.p.log.Debug().Str("endpoint", c.ep.String()).Err(err).Msg("subscriptions not transferred")
		return false
	}
	var moved []uint32
	for i, tr := range res.Results {
		if tr != nil && tr.StatusCode == ua.StatusOK {
			moved = append(moved, ids[i])
		}
	}
	if len(moved) == len(ids) {
		c.takeOver(r, resumeTransferred)
		return true
	}
	if len(moved) > 0 {
		_, _ = send[*ua.DeleteSubscriptionsResponse](ctx, cl, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: moved})
	}
	return false
}

// takeOver makes s carry on r's subscriptions and items.
func (c *conn) takeOver(r *remnant, how resumeKind) {
	o := r.from
	c.how = how
	c.lostAt = r.lostAt
	c.healthSub, c.dataSub, c.dataQuiet = o.conn.healthSub, o.conn.dataSub, o.conn.dataQuiet
	c.link = o.conn.link
	c.items = o.conn.items
	// Acknowledgements of delivered messages that did not go out yet.
	c.acks = o.conn.takeAcks()
}

// resumeServing makes s, which took over the serving session's
// subscriptions, carry the data at once: no snapshot is needed, since
// nothing is lost; its sequencers ask for what went missing, and
// checkRecovered reports the recovery once the gaps are closed.
func (p *Pair) resumeServing(s *session, now time.Time) {
	s.promotion = nil
	s.to(phaseRecovering)
	p.serving = s
	// A server may send the samples of its last messages before the
	// break again, in new messages on the new channel (node-opcua does
	// when the session is activated again at once): they were delivered
	// already.
	r := &resumption{since: now, recent: map[uint32]*ua.DataValue{}}
	for _, notes := range s.lastMsgs {
		for _, n := range notes {
			r.recent[n.handle] = n.dv
		}
	}
	s.resumed = r
	p.pushDesires()
	if p.tellPolicyServing(s, now) {
		p.checkRecovered(s, now)
	}
}

// recoverBound is how long after a resume the recovery is reported at the
// latest, gaps closed or not: a gap still open then is being asked for,
// and its outcome is reported on its own (EventNotificationsLost).
const recoverBound = 2 * time.Second

// checkRecovered reports a resumed session's recovery once the data
// subscription has answered on the new channel and neither subscription
// has a gap left, or after recoverBound.
func (p *Pair) checkRecovered(s *session, now time.Time) {
	r := s.resumed
	if s.phase != phaseRecovering {
		return
	}
	if now.Sub(r.since) < recoverBound {
		if !r.dataSeen {
			return
		}
		for _, sb := range s.subs {
			if !sb.settled() {
				return
			}
		}
	}
	s.resumed = nil
	s.to(phaseServing)
	p.recoveries++
	how := "the session was activated on a new connection"
	if s.conn.how == resumeTransferred {
		how = "its subscriptions were transferred to a new session"
	}
	took := now.Sub(s.conn.lostAt)
	p.emit(Event{Kind: EventLinkRecovered, At: now, Endpoint: s.ep, Role: RoleActive, Level: s.level, Duration: took,
		Republished: r.republished, Transferred: s.conn.how == resumeTransferred,
		Message: fmt.Sprintf("%s link recovered %v after it was lost: %s, %d notifications republished, nothing lost that the server kept",
			s.ep, took.Round(time.Millisecond), how, r.republished)})
}

package uaclient

import (
	"context"
	"fmt"
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
	// takeover: built from a predecessor's Handoff (takeover.go); there
	// is no session to activate, only the data subscription to transfer.
	takeover bool
}

// usable reports whether r may still be taken over at now.
func (r *remnant) usable(now time.Time) bool {
	return r != nil && r.sess != nil && !r.gone.Load() && now.Sub(r.lostAt) < r.from.conn.link.SessionTimeout
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

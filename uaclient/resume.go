package uaclient

import (
	"context"
	"errors"
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

// takeover moves the predecessor's data subscription to the new session
// on c and gives the session a health subscription of its own (the
// predecessor's, if it still exists, is deleted). An error that wraps
// errTransferRefused is the server's answer: c falls back to new
// subscriptions. Any other is a link or server fault, and the next
// attempt tries again.
func (c *conn) takeover(ctx context.Context, cl *opcua.Client, r *remnant) error {
	o := r.from.conn
	ids := []uint32{o.dataSub}
	if o.healthSub != 0 {
		ids = append(ids, o.healthSub)
	}
	res, err := send[*ua.TransferSubscriptionsResponse](ctx, cl, &ua.TransferSubscriptionsRequest{SubscriptionIDs: ids})
	var code ua.StatusCode
	switch {
	case errors.As(err, &code):
		return fmt.Errorf("%w: TransferSubscriptions: %v", errTransferRefused, code)
	case err != nil:
		return fmt.Errorf("TransferSubscriptions: %w", err)
	case len(res.Results) != len(ids) || res.Results[0] == nil:
		return fmt.Errorf("%w: %d results for %d subscriptions", errTransferRefused, len(res.Results), len(ids))
	}
	if len(ids) > 1 && res.Results[1] != nil && res.Results[1].StatusCode == ua.StatusOK {
		// The successor watches the server's health with a subscription
		// of its own, created below; the predecessor's would only run
		// on until its lifetime ends.
		_, _ = send[*ua.DeleteSubscriptionsResponse](ctx, cl, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: ids[1:]})
	}
	tr := res.Results[0]
	if tr.StatusCode != ua.StatusOK {
		return fmt.Errorf("%w: data subscription %d: %v", errTransferRefused, o.dataSub, tr.StatusCode)
	}
	c.takeOver(r, resumeTransferred)
	c.healthSub, c.link.Health = 0, SubscriptionParams{}
	if err := c.subscribeHealth(ctx, cl); err != nil {
		return err
	}
	c.link.settle()
	c.avail = tr.AvailableSequenceNumbers
	return nil
}

// leaveClose ends the client of a serving session whose data subscription
// stays on the server for a successor (WithKeepSubscriptionAtClose): the
// health subscription is deleted, the session closed without deleting
// the data subscription (CloseSession, DeleteSubscriptions false), and
// the channel closed. One round trip each, within 250 ms in all.
func (c *conn) leaveClose() {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	cl := c.client
	if c.healthSub != 0 {
		_, _ = send[*ua.DeleteSubscriptionsResponse](ctx, cl, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: []uint32{c.healthSub}})
	}
	_, _ = send[*ua.CloseSessionResponse](ctx, cl, &ua.CloseSessionRequest{DeleteSubscriptions: false})
	_, _ = cl.DetachSession(ctx)
	closeClient(cl, false)
}

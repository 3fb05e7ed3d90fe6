package uaclient

import (
	"context"
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"
	"strings"

	"github.com/gopcua/opcua/ua"
)

// Write writes value (a Go value gopcua can put in a Variant: float64,
// int32, bool, string, ...) to the Value of the item with the given handle,
// on the active endpoint, and returns the server's status. The write is
// sent only while the active session carries the data and its current
// ServiceLevel is Healthy (200 or more); otherwise it is refused with a
// *WriteRefusedError (errors.Is(err, ErrWriteRefused)) and nothing is sent:
// a standby, a degraded server or one in maintenance is never written to.
// A status other than Good is also returned as the error.
func (p *Pair) Write(ctx context.Context, handle uint32, value any) (ua.StatusCode, error) {
	return p.write(ctx, writeTarget{handle: handle}, value)
}

// WriteNode is Write for a node given by its ID ("ns=1;s=Setpoint0000")
// rather than by an item's handle; the node need not be monitored.
func (p *Pair) WriteNode(ctx context.Context, nodeID string, value any) (ua.StatusCode, error) {
	return p.write(ctx, writeTarget{node: nodeID, byNode: true}, value)
}

type writeTarget struct {
	handle uint32
	node   string
	byNode bool
}

type writeGrant struct {
	c    *conn // the active session's conn, acquired for the write
	node *ua.NodeID
	err  error
}

func (p *Pair) write(ctx context.Context, t writeTarget, value any) (ua.StatusCode, error) {
	v, err := ua.NewVariant(value)
	if err != nil {
		return ua.StatusBadTypeMismatch, fmt.Errorf("servicelevel: write: value %v (%T): %w", value, value, err)
	}
	p.mu.Lock()
	closed, started := p.closed, p.started
	p.mu.Unlock()
	switch {
	case closed:
		return ua.StatusBadNotConnected, ErrClosed
	case !started:
		return ua.StatusBadNotConnected, ErrNotStarted
	}
	reply := make(chan writeGrant, 1)
	if err := p.call(ctx, evWrite{t: t, reply: reply}); err != nil {
		return ua.StatusBadNotConnected, err
	}
	var g writeGrant
	select {
	case g = <-reply:
	case <-ctx.Done():
		// The loop may still grant it: take the grant back.
		go func() {
			select {
			case g := <-reply:
				if g.c != nil {
					g.c.release()
				}
			case <-p.loopDone:
			}
		}()
		return ua.StatusBadTimeout, ctx.Err()
	case <-p.loopDone:
		return ua.StatusBadNotConnected, ErrClosed
	}
	if g.err != nil {
		return ua.StatusBadNotConnected, g.err
	}
	defer g.c.release()
	return g.c.write(ctx, g.node, v)
}

func (p *Pair) onWrite(ev evWrite) {
	refuse := func(l servicelevel.Level, cause error, reason string) {
		ev.reply <- writeGrant{err: &WriteRefusedError{Endpoint: p.pol.Active(), Level: l, Err: cause, Reason: reason}}
	}
	s := p.serving
	switch {
	case s == nil || s.dead():
		refuse(servicelevel.Unknown(), ErrNoSession, "no endpoint carries the data")
		return
	case p.activating != nil || s.ep != p.pol.Active():
		refuse(s.level, ErrNoSession, fmt.Sprintf("a switch to %s is in progress", p.pol.Active()))
		return
	case !s.level.Healthy():
		refuse(s.level, ErrNotHealthy, fmt.Sprintf("%s reports %s: only a Healthy server (200 or more) takes writes", s.ep, levelText(s.level, s.levelProblem)))
		return
	}
	var node *ua.NodeID
	if ev.t.byNode {
		id, err := ParseNodeID(strings.TrimSpace(ev.t.node))
		var n *ua.NodeID
		if err == nil {
			n, err = id.Resolve(s.conn.ns)
		}
		if err != nil {
			ev.reply <- writeGrant{err: fmt.Errorf("uaclient: write: node ID %q: %v", ev.t.node, err)}
			return
		}
		node = n
	} else {
		it := p.items[ev.t.handle]
		if it == nil {
			ev.reply <- writeGrant{err: fmt.Errorf("servicelevel: write: item %d: %w", ev.t.handle, ErrUnknownHandle)}
			return
		}
		n, err := it.node.Resolve(s.conn.ns)
		if err != nil {
			ev.reply <- writeGrant{err: fmt.Errorf("servicelevel: write: item %d: %w", ev.t.handle, err)}
			return
		}
		node = n
	}
	if !s.conn.acquire() {
		refuse(s.level, ErrNoSession, "the active session is closing")
		return
	}
	ev.reply <- writeGrant{c: s.conn, node: node}
}

// write writes value to node on this session; the caller holds acquire.
func (c *conn) write(ctx context.Context, node *ua.NodeID, value *ua.Variant) (ua.StatusCode, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	res, err := send[*ua.WriteResponse](ctx, c.client, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID:      node,
		AttributeID: ua.AttributeIDValue,
		Value:       &ua.DataValue{EncodingMask: ua.DataValueValue, Value: value},
	}}})
	if err != nil {
		if c.ctx.Err() != nil && ctx.Err() != nil {
			return ua.StatusBadNotConnected, fmt.Errorf("servicelevel: write on %s: the session ended", c.ep)
		}
		return ua.StatusBadCommunicationError, fmt.Errorf("servicelevel: write on %s: %w", c.ep, err)
	}
	if len(res.Results) != 1 {
		return ua.StatusBadUnexpectedError, fmt.Errorf("servicelevel: write on %s: %d results for 1 node", c.ep, len(res.Results))
	}
	code := res.Results[0]
	if code != ua.StatusOK {
		return code, fmt.Errorf("servicelevel: write on %s: %w", c.ep, code)
	}
	return code, nil
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apbridge/apbridge/edge"
	"github.com/nats-io/nats.go"
)

// validateEdge checks the edge section and what it asks of the sink. An
// edge site stores every update in a stream of its own JetStream domain,
// on the site's leaf nodes, and the hub sources from it (docs/edge.md):
//
//   - sink: jetstream, with jetstream.domain naming the site's domain, so
//     that the sink creates and checks its stream there whatever server it
//     is connected to, and never in the hub's;
//   - a hub domain other than the site's: one domain across the leaf
//     connection would be one JetStream, stored across the WAN;
//   - jetstream.retention: limits: with interest or workqueue retention a
//     message no consumer wants is removed, and while the WAN is down the
//     hub's sourcing consumer is gone, so the site would keep nothing;
//   - jetstream.maxBytes: the byte limit is what JetStream reserves on the
//     disk of each replica when it places the stream (it refuses a stream
//     a server has no room for), so that the disk cannot fill before the
//     limit does, and the outage the site can absorb is known.
func (c *Config) validateEdge(add func(string, ...any)) {
	if c.Edge == nil {
		return
	}
	for _, e := range Errors(c.Edge.Validate()) {
		add("%v", e)
	}
	if c.Sink != SinkJetStream {
		add("edge: an edge site stores every update in a stream of the site's JetStream domain: set sink: jetstream (and jetstream.domain)")
		return
	}
	js := c.JetStream
	switch {
	case js.Domain == "":
		add("jetstream.domain: required with edge: the site's JetStream domain, where the relay creates and checks the site stream")
	case js.Domain == c.Edge.Hub.Domain:
		add("edge.hub.domain: %q is the site's domain too (jetstream.domain): the hub and the site need JetStream domains of their own", c.Edge.Hub.Domain)
	}
	if js.Retention != "" && js.Retention != "limits" {
		add("jetstream.retention: %q with edge: the site stream must keep what no consumer has read while the WAN is down (valid with edge: limits)", js.Retention)
	}
	if js.MaxBytes == 0 {
		add("jetstream.maxBytes: required with edge: the site stream's byte limit, sized for the longest outage (edge.outageFloor); JetStream reserves it on each replica's disk, so the disk cannot fill first")
	}
}

// edgeSite is the site side of the edge section: the sink's stream and
// domain.
func (c *Config) edgeSite() edge.Site {
	js := c.JetStream.WithDefaults()
	return edge.Site{Domain: js.Domain, Stream: js.Stream}
}

// EdgeStatus checks the edge site of c once, as `apbridge edge status`
// does: it connects to c's servers (the site's), reads the site stream
// and asks the hub about the hub stream across the leaf connection. The
// hub's position is the hub's own answer; when the hub cannot be asked, a
// one-shot check knows no earlier one and counts every message of the
// site stream as unsourced (a running relay's monitor remembers).
func EdgeStatus(ctx context.Context, c *Config, opts ...nats.Option) (edge.Report, error) {
	if c.Edge == nil {
		return edge.Report{}, errors.New("edge status: the config has no edge section")
	}
	nopts, err := c.natsOptions()
	if err != nil {
		return edge.Report{}, err
	}
	nc, err := nats.Connect(strings.Join(c.NATS.Servers, ","), append(append(nopts, nats.Name(c.connName()+"-edge-status")), opts...)...)
	if err != nil {
		return edge.Report{}, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	return edge.Check(ctx, nc, *c.Edge, c.edgeSite())
}

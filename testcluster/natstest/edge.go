package natstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Edge is a hub cluster and a site cluster joined by leaf node connections
// across a WAN that a test can cut, freeze or slow down: the topology of a
// plant whose relay publishes into a JetStream domain of its own, stored on
// site, and whose hub stream sources from it.
//
// Every site node keeps one leaf node connection to one of the hub's nodes,
// each hub leaf port behind a faultproxy.Proxy: the WAN is those proxies.
type Edge struct {
	// Hub is the hub cluster (JetStream domain HubDomain), Site the site's
	// leaf cluster (domain SiteDomain).
	Hub, Site *Cluster
	// HubDomain and SiteDomain are the clusters' JetStream domains.
	HubDomain, SiteDomain string

	opts EdgeOptions // with the defaults
}

// EdgeOptions configures StartEdge. Zero fields take the defaults.
type EdgeOptions struct {
	// HubNodes and SiteNodes are the clusters' sizes (default 3 each).
	HubNodes, SiteNodes int
	// HubDomain and SiteDomain are the JetStream domains (default "hub"
	// and "site").
	HubDomain, SiteDomain string
	// Hub and Site are more options for each cluster (a logger, lame-duck
	// timing); the options that make the topology are StartEdge's.
	Hub, Site []Option
}

// StartEdge starts the hub cluster with a leaf node port behind a proxy
// on every node, then the site cluster whose nodes are leaf nodes of the
// hub through those proxies, and returns once every site node has its
// leaf connection and the hub reaches the site's JetStream API across it.
func StartEdge(ctx context.Context, o EdgeOptions) (*Edge, error) {
	e, err := StartHub(ctx, o)
	if err != nil {
		return nil, err
	}
	o = e.opts
	site, err := StartSite(ctx, o, e.LeafURLs()...)
	if err != nil {
		e.Close()
		return nil, err
	}
	e.Site = site
	wctx, cancel := context.WithTimeout(ctx, site.cfg.ReadyWait)
	defer cancel()
	if err := e.WaitLinked(wctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// withDefaults fills in the zero fields and checks the domains.
func (o EdgeOptions) withDefaults() (EdgeOptions, error) {
	if o.HubNodes == 0 {
		o.HubNodes = 3
	}
	if o.SiteNodes == 0 {
		o.SiteNodes = 3
	}
	if o.HubDomain == "" {
		o.HubDomain = "hub"
	}
	if o.SiteDomain == "" {
		o.SiteDomain = "site"
	}
	if o.HubDomain == o.SiteDomain {
		return o, fmt.Errorf("natstest: the hub and the site need different JetStream domains, both are %q", o.HubDomain)
	}
	return o, nil
}

// StartHub starts only the hub half of an edge: the hub cluster, each
// node's leaf node port behind a proxy (LeafURLs). Its Site is nil. A
// benchmark runs it in a process of its own, as a hub is a machine of its
// own, and starts the site with StartSite in another: the two then share
// no heap and no garbage collector. CutWAN, FreezeWAN, SlowWAN and HealWAN
// work on it.
func StartHub(ctx context.Context, o EdgeOptions) (*Edge, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("natstest: StartEdge: %w", err)
	}
	hubOpts := append([]Option{WithNodes(o.HubNodes), WithName("hub"), WithDomain(o.HubDomain), WithLeafListen()}, o.Hub...)
	hub, err := Start(ctx, hubOpts...)
	if err != nil {
		return nil, fmt.Errorf("natstest: StartEdge: hub: %w", err)
	}
	return &Edge{Hub: hub, HubDomain: o.HubDomain, SiteDomain: o.SiteDomain, opts: o}, nil
}

// LeafURLs returns the URLs a site dials for the hub's leaf node ports,
// each through its proxy (the WAN).
func (e *Edge) LeafURLs() []string {
	var urls []string
	for _, n := range e.Hub.Nodes() {
		urls = append(urls, n.LeafURL())
	}
	return urls
}

// StartSite starts the site's leaf cluster of o (domain o.SiteDomain,
// o.Site's options) whose nodes are leaf nodes of the hub at hubLeafURLs,
// and returns once it is ready; that its leaf connections are up is
// WaitSiteLinked's to wait for.
func StartSite(ctx context.Context, o EdgeOptions, hubLeafURLs ...string) (*Cluster, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("natstest: StartSite: %w", err)
	}
	siteOpts := append([]Option{WithNodes(o.SiteNodes), WithName("site"), WithDomain(o.SiteDomain), WithLeafRemotes(hubLeafURLs...)}, o.Site...)
	site, err := Start(ctx, siteOpts...)
	if err != nil {
		return nil, fmt.Errorf("natstest: StartSite: %w", err)
	}
	return site, nil
}

// WaitSiteLinked waits until every running node of site has a leaf
// connection and hub, a connection to the hub, reaches the site's
// JetStream API across them: StartEdge's readiness for a hub that runs
// elsewhere.
func WaitSiteLinked(ctx context.Context, site *Cluster, hub *nats.Conn, siteDomain string) error {
	return waitLinked(ctx, func() error { return siteLinked(site, hub, siteDomain) })
}

// waitLinked polls linked until it reports no error or ctx ends.
func waitLinked(ctx context.Context, linked func() error) error {
	for {
		err := linked()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: the site is not linked to the hub: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func siteLinked(site *Cluster, hub *nats.Conn, siteDomain string) error {
	for _, n := range site.Nodes() {
		srv := n.Server()
		if srv == nil || !srv.Running() {
			continue
		}
		lz, err := srv.Leafz(&server.LeafzOptions{})
		if err != nil {
			return err
		}
		if lz.NumLeafs == 0 {
			return fmt.Errorf("site node %s has no leaf connection", srv.Name())
		}
	}
	return reachSiteAPI(hub, siteDomain)
}

// reachSiteAPI asks the site's JetStream API for its account info across
// the leaf connections.
func reachSiteAPI(hub *nats.Conn, siteDomain string) error {
	m, err := hub.Request("$JS."+siteDomain+".API.INFO", nil, 2*time.Second)
	if err != nil {
		return fmt.Errorf("the site's JetStream API from the hub: %w", err)
	}
	if len(m.Data) == 0 {
		return errors.New("the site's JetStream API from the hub: empty reply")
	}
	return nil
}

// Close shuts both clusters down (the hub only, from StartHub). It is
// idempotent.
func (e *Edge) Close() {
	if e.Site != nil {
		e.Site.Close()
	}
	e.Hub.Close()
}

// wan is the proxies in front of the hub's leaf ports.
func (e *Edge) wan() []*faultproxy.Proxy {
	var out []*faultproxy.Proxy
	for _, n := range e.Hub.Nodes() {
		out = append(out, n.LeafProxy())
	}
	return out
}

// CutWAN breaks the WAN: every leaf connection is reset and new ones are
// refused until HealWAN, as when the site's uplink goes down.
func (e *Edge) CutWAN() {
	for _, p := range e.wan() {
		p.Refuse()
	}
	for _, p := range e.wan() {
		p.ResetAll()
	}
}

// FreezeWAN makes the WAN silent without closing anything, as a
// blackholed route does: the leaf connections stay open and pass nothing
// until HealWAN (or until a server gives up on its silent peer).
func (e *Edge) FreezeWAN() {
	for _, p := range e.wan() {
		p.Freeze()
	}
}

// SlowWAN adds oneWay of latency in each direction of every leaf
// connection; 0 removes it.
func (e *Edge) SlowWAN(oneWay time.Duration) {
	for _, p := range e.wan() {
		p.SetDelay(oneWay)
	}
}

// HealWAN ends a cut or a freeze. The site nodes dial the hub again on
// their own; WaitLinked waits for that.
func (e *Edge) HealWAN() {
	for _, p := range e.wan() {
		p.Heal()
	}
}

// LeafConns returns how many leaf node connections the hub's running
// nodes have now.
func (e *Edge) LeafConns() int {
	n := 0
	for _, node := range e.Hub.Nodes() {
		srv := node.Server()
		if srv == nil || !srv.Running() {
			continue
		}
		lz, err := srv.Leafz(&server.LeafzOptions{})
		if err == nil {
			n += lz.NumLeafs
		}
	}
	return n
}

// WaitLinked waits until every running site node has a leaf connection to
// the hub and a hub node reaches the site's JetStream API across it
// ($JS.<site domain>.API.INFO): what a hub stream that sources from the
// site needs.
func (e *Edge) WaitLinked(ctx context.Context) error {
	return waitLinked(ctx, func() error {
		// A connection a poll: a hub node may restart meanwhile.
		nc, err := e.Hub.connectAny()
		if err != nil {
			return err
		}
		defer nc.Close()
		return siteLinked(e.Site, nc, e.SiteDomain)
	})
}

// HubConn connects a client to the hub (any running node), for reading
// the hub stream back.
func (e *Edge) HubConn() (*nats.Conn, error) {
	return nats.Connect(strings.Join(e.Hub.URLs(), ","), append(e.Hub.ClientOptions(), nats.MaxReconnects(-1))...)
}

// SourceFromSite creates the hub stream name (replicas replicas, file
// storage, no subjects of its own) that sources the site stream
// siteStream across the leaf connection, through the site domain's API:
// the hub side of an edge site as docs/edge.md configures it.
//
// The source is durable: SourceFromSite first creates, in the site
// stream, the consumer SourceConsumer(name) (replicated as the site
// stream, acknowledged by flow control, delivering to SourceDeliver(name)),
// and the hub stream sources through it. An ephemeral source consumer
// (nats-server's default) is deleted by the site once the WAN has been
// down 10 s, and the hub's request for a new one, sent into the cut, is
// only given up after 30 s, then retried with a backoff that grows to
// 2 min: the catch-up after a long outage starts up to minutes after the
// WAN heals. With a durable one the hub listens on the deliver subject
// while it backs off, and asks again as soon as the site's heartbeat
// arrives. A stream or consumer of the name that exists already is left
// as it is.
func (e *Edge) SourceFromSite(ctx context.Context, name, siteStream string, replicas int, opts ...SourceOption) error {
	nc, err := e.Hub.connectAny()
	if err != nil {
		return err
	}
	defer nc.Close()
	return SourceFromSiteOn(ctx, nc, e.SiteDomain, name, siteStream, replicas, opts...)
}

// SourceOption configures SourceFromSite's source consumer.
type SourceOption func(*jetstream.ConsumerConfig)

// WithCatchupRate caps what the site's source consumer sends the hub at
// bitsPerSecond (the consumer's rate_limit_bps; 0: no cap): the catch-up
// after an outage then leaves the site's servers, which also store the
// relay's new updates, the rest of their time.
func WithCatchupRate(bitsPerSecond uint64) SourceOption {
	return func(c *jetstream.ConsumerConfig) { c.RateLimit = bitsPerSecond }
}

// SourceFromSiteOn is SourceFromSite on hub, a connection to the hub
// cluster, for a site of the domain siteDomain: for a hub or a site that
// runs in another process (StartHub, StartSite).
func SourceFromSiteOn(ctx context.Context, hub *nats.Conn, siteDomain, name, siteStream string, replicas int, opts ...SourceOption) error {
	site, err := jetstream.NewWithDomain(hub, siteDomain)
	if err != nil {
		return err
	}
	ss, err := site.Stream(ctx, siteStream)
	if err != nil {
		return fmt.Errorf("site stream %s: %w", siteStream, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:        SourceConsumer(name),
		DeliverSubject: SourceDeliver(name),
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
		// Under flow-control acknowledgement the site stops delivering
		// at MaxAckPending until the hub's next flow-control reply: it
		// must not be what limits the catch-up (the flow-control window
		// itself, 32 MiB, holds about 75,000 updates).
		MaxAckPending: SourceMaxAckPending,
		Replicas:      ss.CachedInfo().Config.Replicas,
	}
	for _, o := range opts {
		o(&cc)
	}
	_, err = site.CreatePushConsumer(ctx, siteStream, cc)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("source consumer on the site stream %s: %w", siteStream, err)
	}
	js, err := jetstream.New(hub)
	if err != nil {
		return err
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Replicas: replicas,
		Storage:  jetstream.FileStorage,
		Sources: []*jetstream.StreamSource{{
			Name:     siteStream,
			External: &jetstream.ExternalStream{APIPrefix: "$JS." + siteDomain + ".API"},
			Consumer: &jetstream.StreamConsumerSource{Name: SourceConsumer(name), DeliverSubject: SourceDeliver(name)},
		}},
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil
	}
	return err
}

// SourceMaxAckPending is the MaxAckPending of SourceFromSite's durable
// source consumer.
const SourceMaxAckPending = 200_000

// SourceConsumer is the name of the durable consumer in the site stream
// through which the hub stream hubStream sources it.
func SourceConsumer(hubStream string) string { return "SRC_" + hubStream }

// SourceDeliver is the subject that consumer delivers to, at the hub.
func SourceDeliver(hubStream string) string { return "edge.source." + hubStream }

// StreamMsgs returns how many messages the stream holds in cl, asked of a
// running node; 0 when it cannot tell.
func StreamMsgs(ctx context.Context, cl *Cluster, stream string) uint64 {
	st, err := cl.StreamState(ctx, stream)
	if err != nil {
		return 0
	}
	return st.Msgs
}

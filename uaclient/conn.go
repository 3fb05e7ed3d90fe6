package uaclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uacp"
)

// dialer returns the UACP dialer of one connect attempt, and a release to
// call when the attempt is over. gopcua v0.8.0's HEL/ACK handshake reads
// without looking at the dial context, so a connect to a frozen link would
// hold the session, and Pair.Close, until the connect timeout (measured:
// 9.7 s). The dialer's sockets are shut down when the session's context
// ends, which ends that read at once.
func (c *conn) dialer() (d *uacp.Dialer, release func()) {
	return abortingDialer(c.ctx, c.dialTimeout)
}

// abortingDialer is a UACP dialer whose sockets are shut down when ctx
// ends (see conn.dialer), each dial bounded by timeout; release ends the
// watch once the sockets are closed.
func abortingDialer(ctx context.Context, timeout time.Duration) (d *uacp.Dialer, release func()) {
	var mu sync.Mutex
	var stops []func() bool
	nd := &net.Dialer{
		Timeout: timeout,
		ControlContext: func(_ context.Context, _, _ string, rc syscall.RawConn) error {
			stop := context.AfterFunc(ctx, func() { abortConn(rc) })
			mu.Lock()
			stops = append(stops, stop)
			mu.Unlock()
			return nil
		},
	}
	// A copy: gopcua's buffer-size options write to the ACK they are
	// given, and the default one is shared by every client.
	ack := *uacp.DefaultClientACK
	return &uacp.Dialer{Dialer: nd, ClientACK: &ack}, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, stop := range stops {
			stop()
		}
	}
}

// conn is a session's I/O: one gopcua client on the endpoint, and the
// goroutines that use it (publishers, the item worker, reads, writes,
// Republish requests). They talk to the loop only through events, posted
// with the session they belong to. The gopcua client is never closed
// while a request of ours is in flight on it: every request runs between
// acquire and release, and run closes the client only after waiting for
// them.
type conn struct {
	p           *Pair
	s           *session // the session it does the I/O of
	ep          servicelevel.Endpoint
	url         string
	readInfo    bool // read the server's ServerInfo at connect
	ctx         context.Context
	cancel      context.CancelFunc
	dialTimeout time.Duration
	polite      atomic.Bool // close the OPC UA session rather than just the socket
	keep        atomic.Bool // leave the OPC UA session open on the server: a remnant takes it over
	leave       atomic.Bool // close the session but leave the data subscription for a successor
	from        *remnant    // a session this one may take over; nil: none
	exited      chan struct{}

	// Set by run before it posts evConnected; read-only afterwards.
	client    *opcua.Client
	healthSub uint32
	dataSub   uint32
	dataQuiet time.Duration // the data subscription's allowed silence
	initial   *ua.DataValue // the first ServiceLevel read
	ns        []string      // the server's NamespaceArray, for nsu= node IDs
	info      *ServerInfo   // what the server says of itself, for the pair's check; nil: not read
	upAt      time.Time
	how       resumeKind  // how the session came up
	lostAt    time.Time   // when the session taken over lost its link
	link      LinkParams  // as the server revised them
	items     *itemState  // the data items; the worker's
	avail     []uint32    // a takeover's data messages the server held (takeover.go)
	refused   error       // why a takeover fell back to new subscriptions; nil: it did not
	successor bool        // took a predecessor's data subscription over (set by the loop)
	first     firstValues // first samples of the items a promotion turns Reporting

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup // children: publishers, worker, reads, writes

	wmu  sync.Mutex
	want *desire
	kick chan struct{}

	amu  sync.Mutex
	acks []*ua.SubscriptionAcknowledgement
}

// acquire registers a request on the session; false once it is closing.
func (c *conn) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *conn) release() { c.wg.Done() }

// run is the session's life: connect, serve until cancelled, then close
// the client once nothing of ours uses it any more.
func (c *conn) run() {
	defer c.p.wg.Done()
	err := c.connect()
	switch {
	case !c.p.post(evConnected{s: c.s, err: err}):
		c.cancel()
	case err == nil:
		// Started after the loop has the session, so that everything
		// they post comes after evConnected.
		for range c.p.opt.publishers {
			c.child(c.publisher)
		}
		c.child(c.worker)
	}
	<-c.ctx.Done()
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.wg.Wait()
	if c.client != nil && c.leave.Load() && c.polite.Load() && !c.keep.Load() {
		c.leaveClose()
	} else if c.client != nil {
		if c.keep.Load() {
			// Without a session the close ends only the channel.
			_, _ = c.client.DetachSession(context.Background())
		}
		closeClient(c.client, c.polite.Load())
	}
	close(c.exited)
}

func (c *conn) child(f func()) {
	if c.acquire() {
		go func() {
			defer c.release()
			f()
		}()
	}
}

// closeClient closes c. A polite close ends the OPC UA session (one round
// trip, at most 250 ms); otherwise only the channel and the socket are
// closed, which a dead or frozen link needs.
func closeClient(c *opcua.Client, polite bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	if !polite {
		cancel()
	}
	c.Close(ctx)
	cancel()
}

// clientOptions returns the client's options: the Pair's defaults, the
// options for both endpoints, those for this endpoint, then dial (those
// read from the server for this connection), then what the Pair must
// control itself.
func (c *conn) clientOptions(d *uacp.Dialer, dial []opcua.Option) []opcua.Option {
	o := &c.p.opt
	opts := []opcua.Option{
		opcua.Dialer(d), // first: a dialer of the user's own wins
		opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.RequestTimeout(10 * time.Second),
		opcua.SessionTimeout(c.p.set.sessionTimeout()),
		opcua.DialTimeout(c.dialTimeout),
	}
	opts = append(opts, o.clientOpts...)
	opts = append(opts, o.endpOpts[c.ep]...)
	opts = append(opts, dial...)
	return append(opts,
		opcua.AutoReconnect(false),
		opcua.StateChangedCh(nil),
		opcua.SessionName(o.name+"-"+c.ep.String()),
	)
}

// connect dials the endpoint within the dial timeout and sets the session
// up within the connect timeout. A session that takes over a remnant
// activates the remnant's session on a new channel, or failing that
// transfers its subscriptions to a new session; any other creates the
// health subscription (ServiceLevel and CurrentTime) and the data
// subscription (empty until items are wanted). Either way it reads the
// level once.
func (c *conn) connect() error {
	dctx, dcancel := context.WithTimeout(c.ctx, c.dialTimeout)
	defer dcancel()
	var dial []opcua.Option
	if f := c.p.opt.dialOpts; f != nil {
		var err error
		if dial, err = f(dctx, c.ep, c.url); err != nil {
			return &refusedError{err}
		}
	}
	d, release := c.dialer()
	defer release()
	opts := c.clientOptions(d, dial)
	cl, err := opcua.NewClient(c.url, opts...)
	if err != nil {
		return fmt.Errorf("client options: %w", err)
	}
	r := c.from
	if r.usable(time.Now()) {
		err = c.reattach(dctx, cl, r)
		switch {
		case err == nil:
		case errors.Is(err, errSessionGone):
			c.p.log.Info().Str("endpoint", c.ep.String()).Err(err).Msg("a new session takes over")
			closeClient(cl, false)
			if cl, err = opcua.NewClient(c.url, opts...); err != nil {
				return fmt.Errorf("client options: %w", err)
			}
		default:
			closeClient(cl, false)
			return err
		}
	}
	if c.how == resumeNone {
		err = cl.Connect(dctx)
		dcancel()
		if err != nil {
			closeClient(cl, false)
			return err
		}
	}
	dcancel()
	ctx, cancel := context.WithTimeout(c.ctx, c.p.set.Failover.ConnectTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		closeClient(cl, false)
		return fmt.Errorf("%s: %w", what, err)
	}
	switch {
	case c.how == resumeNone && r != nil && r.takeover:
		if err := c.takeover(ctx, cl, r); errors.Is(err, errTransferRefused) {
			c.refused = err
		} else if err != nil {
			return fail("take the predecessor's subscription over", err)
		}
	case c.how == resumeNone && r != nil:
		// The subscriptions outlive the session, for this.
		c.transfer(ctx, cl, r)
	}
	if c.how == resumeNone {
		if err := c.subscribe(ctx, cl); err != nil {
			closeClient(cl, false)
			return err
		}
	}
	nodes := []*ua.NodeID{nodeServiceLevel(), nodeNamespaceArray()}
	if c.readInfo {
		// What the server says of itself, for the check of the pair and
		// for partner discovery: in this Read, so that it costs no round
		// trip (redundancy.go). A single server is no pair to check.
		nodes = append(nodes, serverInfoNodes()...)
	}
	rctx, rcancel := context.WithTimeout(c.ctx, c.p.set.ReadTimeout)
	dvs, err := readValues(rctx, cl, nodes)
	rcancel()
	if err != nil {
		return fail("read ServiceLevel", err)
	}
	c.initial = dvs[0]
	if v := dvs[1].Value; v != nil {
		c.ns, _ = v.Value().([]string) // a server without one has only ns 0
	}
	if len(dvs) > 2 {
		info := serverInfoOf(dvs[2:])
		c.info = &info
	}
	c.client = cl
	c.upAt = time.Now()
	return nil
}

// subscribe creates the health and data subscriptions of a new session,
// and notes the link parameters the server granted.
func (c *conn) subscribe(ctx context.Context, cl *opcua.Client) error {
	set := &c.p.set
	c.items = newItemState()
	if err := c.subscribeHealth(ctx, cl); err != nil {
		return err
	}
	var err error
	// A subscription outlives its session (Part 4, 5.13.1): it must
	// outlive a takeover too, for a successor to find it.
	outlive := max(c.link.SessionTimeout, set.TakeoverWindow+resumeMargin)
	keepAlive := dataKeepAlive(set.PublishingInterval)
	c.dataSub, c.link.Data, err = createSubscription(ctx, cl, set.PublishingInterval, keepAlive, outlive, priorityData)
	if err != nil {
		return fmt.Errorf("create the data subscription: %w", err)
	}
	// It answers at least once per keep-alive period (a keep-alive when
	// nothing changed); three periods of silence mean it is gone.
	c.dataQuiet = 3*time.Duration(keepAlive)*set.PublishingInterval + set.HeartbeatTimeout
	c.link.settle()
	return nil
}

// subscribeHealth creates the health subscription (ServiceLevel and
// CurrentTime) of a new session, and notes the session timeout and the
// subscription's parameters the server granted.
func (c *conn) subscribeHealth(ctx context.Context, cl *opcua.Client) error {
	set := &c.p.set
	c.link.SessionTimeout = set.sessionTimeout()
	if cs := cl.Session(); cs != nil && cs.RevisedTimeout() > 0 {
		c.link.SessionTimeout = cs.RevisedTimeout()
	}
	// A subscription outlives its session (Part 4, 5.13.1): it must
	// outlive a takeover too, for a successor to find it.
	outlive := max(c.link.SessionTimeout, set.TakeoverWindow+resumeMargin)
	var err error
	// Keep-alive count 1: every cycle of the health subscription answers,
	// with a CurrentTime change or a keep-alive, so that the gap check
	// works even on a server that does not let CurrentTime be monitored.
	c.healthSub, c.link.Health, err = createSubscription(ctx, cl, set.HeartbeatInterval, 1, outlive, priorityHealth)
	if err != nil {
		return fmt.Errorf("create the health subscription: %w", err)
	}
	hb := msFloat(set.HeartbeatInterval)
	res, err := createItems(ctx, cl, c.healthSub, []*ua.MonitoredItemCreateRequest{
		monitorRequest(nodeServiceLevel(), handleServiceLevel, hb, 1, ua.MonitoringModeReporting),
		monitorRequest(nodeCurrentTime(), handleCurrentTime, hb, 1, ua.MonitoringModeReporting),
	})
	if err != nil {
		return fmt.Errorf("monitor ServiceLevel and CurrentTime: %w", err)
	}
	_ = res // a rejected item shows as an unreadable level or as keep-alives
	return nil
}

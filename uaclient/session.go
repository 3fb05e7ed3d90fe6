package uaclient

import (
	"context"
	"errors"
	"fmt"
	"github.com/apbridge/apbridge/servicelevel"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uacp"
)

// Client handles of the health subscription's items. The data items live
// in another subscription, so these never collide with the user's.
const (
	handleServiceLevel uint32 = 1
	handleCurrentTime  uint32 = 2
)

// session is one gopcua client on one endpoint, with its subscriptions and
// goroutines. The Pair's loop owns the fields marked "loop"; the session's
// own goroutines own the rest, and they talk to the loop only through
// events. The gopcua client is never closed while a request of ours is in
// flight on it: every request runs between acquire and release, and run
// closes the client only after waiting for them.
type session struct {
	p           *Pair
	ep          servicelevel.Endpoint
	url         string
	id          uint64
	ctx         context.Context
	cancel      context.CancelFunc
	dialTimeout time.Duration
	polite      atomic.Bool // close the OPC UA session rather than just the socket
	keep        atomic.Bool // leave the OPC UA session open on the server: a remnant takes it over
	from        *remnant    // a session this one may take over; nil: none
	exited      chan struct{}

	// Set by run before it posts evConnected; read-only afterwards.
	c         *opcua.Client
	healthSub uint32
	dataSub   uint32
	dataQuiet time.Duration // the data subscription's allowed silence
	initial   *ua.DataValue // the first ServiceLevel read
	ns        []string      // the server's NamespaceArray, for nsu= node IDs
	upAt      time.Time
	how       resumeKind  // how the session came up
	lostAt    time.Time   // when the session taken over lost its link
	link      LinkParams  // as the server revised them
	items     *itemState  // the data items; the worker's
	first     firstValues // first samples of the items a promotion turns Reporting

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup // children: publishers, worker, reads, writes

	wmu  sync.Mutex
	want *desire
	kick chan struct{}

	amu  sync.Mutex
	acks []*ua.SubscriptionAcknowledgement

	// Owned by the loop.
	phase phase
	// promotion is set while the Policy wants s to carry the data and it
	// does not yet; resumed while s recovers a lost session it took over.
	promotion    *promotion
	resumed      *resumption
	level        servicelevel.Level
	sampled      bool // a level was sampled (it may be Unknown)
	levelProblem string
	lastBeat     time.Time // last answer of the health subscription
	lastData     time.Time // last answer of the data subscription
	nextPoll     time.Time
	polling      bool                     // a poll's read is in flight
	wantVer      uint64                   // version of the last desire sent
	subs         map[uint32]*subscription // by subscription ID
	// fence holds, per item, the snapshot's value while no newer one has
	// been delivered: a data change that repeats or predates it is stale.
	fence    map[uint32]*ua.DataValue
	attempt  int
	lastMsgs [2][]dataNote // the last two data messages handed on while serving
}

func newSession(p *Pair, ep servicelevel.Endpoint, id uint64, dialTimeout time.Duration) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		p: p, ep: ep, url: p.set.Endpoints[ep], id: id,
		ctx: ctx, cancel: cancel, dialTimeout: dialTimeout,
		kick:   make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
}

// acquire registers a request on the session; false once it is closing.
func (s *session) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *session) release() { s.wg.Done() }

// run is the session's life: connect, serve until cancelled, then close
// the client once nothing of ours uses it any more.
func (s *session) run() {
	defer s.p.wg.Done()
	err := s.connect()
	switch {
	case !s.p.post(evConnected{s: s, err: err}):
		s.cancel()
	case err == nil:
		// Started after the loop has the session, so that everything
		// they post comes after evConnected.
		for range s.p.opt.publishers {
			s.child(s.publisher)
		}
		s.child(s.worker)
	}
	<-s.ctx.Done()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.wg.Wait()
	if s.c != nil {
		if s.keep.Load() {
			// Without a session the close ends only the channel.
			_, _ = s.c.DetachSession(context.Background())
		}
		closeClient(s.c, s.polite.Load())
	}
	close(s.exited)
}

func (s *session) child(f func()) {
	if s.acquire() {
		go func() {
			defer s.release()
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
func (s *session) clientOptions(d *uacp.Dialer, dial []opcua.Option) []opcua.Option {
	o := &s.p.opt
	opts := []opcua.Option{
		opcua.Dialer(d), // first: a dialer of the user's own wins
		opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.RequestTimeout(10 * time.Second),
		opcua.SessionTimeout(s.p.set.sessionTimeout()),
		opcua.DialTimeout(s.dialTimeout),
	}
	opts = append(opts, o.clientOpts...)
	opts = append(opts, o.endpOpts[s.ep]...)
	opts = append(opts, dial...)
	return append(opts,
		opcua.AutoReconnect(false),
		opcua.StateChangedCh(nil),
		opcua.SessionName(o.name+"-"+s.ep.String()),
	)
}

// connect dials the endpoint within the dial timeout and sets the session
// up within the connect timeout. A session that takes over a remnant
// activates the remnant's session on a new channel, or failing that
// transfers its subscriptions to a new session; any other creates the
// health subscription (ServiceLevel and CurrentTime) and the data
// subscription (empty until items are wanted). Either way it reads the
// level once.
func (s *session) connect() error {
	dctx, dcancel := context.WithTimeout(s.ctx, s.dialTimeout)
	defer dcancel()
	var dial []opcua.Option
	if f := s.p.opt.dialOpts; f != nil {
		var err error
		if dial, err = f(dctx, s.ep, s.url); err != nil {
			return &refusedError{err}
		}
	}
	d, release := s.dialer()
	defer release()
	opts := s.clientOptions(d, dial)
	c, err := opcua.NewClient(s.url, opts...)
	if err != nil {
		return fmt.Errorf("client options: %w", err)
	}
	r := s.from
	if r.usable(time.Now()) {
		err = s.reattach(dctx, c, r)
		switch {
		case err == nil:
		case errors.Is(err, errSessionGone):
			s.p.log.Info().Str("endpoint", s.ep.String()).Err(err).Msg("a new session takes over")
			closeClient(c, false)
			if c, err = opcua.NewClient(s.url, opts...); err != nil {
				return fmt.Errorf("client options: %w", err)
			}
		default:
			closeClient(c, false)
			return err
		}
	}
	if s.how == resumeNone {
		err = c.Connect(dctx)
		dcancel()
		if err != nil {
			closeClient(c, false)
			return err
		}
	}
	dcancel()
	ctx, cancel := context.WithTimeout(s.ctx, s.p.set.Failover.ConnectTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		closeClient(c, false)
		return fmt.Errorf("%s: %w", what, err)
	}
	if s.how == resumeNone && r != nil {
		// The subscriptions outlive the session, for this.
		s.transfer(ctx, c, r)
	}
	if s.how == resumeNone {
		if err := s.subscribe(ctx, c); err != nil {
			closeClient(c, false)
			return err
		}
	}
	rctx, rcancel := context.WithTimeout(s.ctx, s.p.set.ReadTimeout)
	dvs, err := readValues(rctx, c, []*ua.NodeID{nodeServiceLevel(), nodeNamespaceArray()})
	rcancel()
	if err != nil {
		return fail("read ServiceLevel", err)
	}
	s.initial = dvs[0]
	if v := dvs[1].Value; v != nil {
		s.ns, _ = v.Value().([]string) // a server without one has only ns 0
	}
	s.c = c
	s.upAt = time.Now()
	return nil
}

// subscribe creates the health and data subscriptions of a new session,
// and notes the link parameters the server granted.
func (s *session) subscribe(ctx context.Context, c *opcua.Client) error {
	set := &s.p.set
	s.items = newItemState()
	s.link = LinkParams{SessionTimeout: set.sessionTimeout()}
	if cs := c.Session(); cs != nil && cs.RevisedTimeout() > 0 {
		s.link.SessionTimeout = cs.RevisedTimeout()
	}
	outlive := s.link.SessionTimeout
	var err error
	// Keep-alive count 1: every cycle of the health subscription answers,
	// with a CurrentTime change or a keep-alive, so that the gap check
	// works even on a server that does not let CurrentTime be monitored.
	s.healthSub, s.link.Health, err = createSubscription(ctx, c, set.HeartbeatInterval, 1, outlive, priorityHealth)
	if err != nil {
		return fmt.Errorf("create the health subscription: %w", err)
	}
	hb := msFloat(set.HeartbeatInterval)
	res, err := createItems(ctx, c, s.healthSub, []*ua.MonitoredItemCreateRequest{
		monitorRequest(nodeServiceLevel(), handleServiceLevel, hb, 1, ua.MonitoringModeReporting),
		monitorRequest(nodeCurrentTime(), handleCurrentTime, hb, 1, ua.MonitoringModeReporting),
	})
	if err != nil {
		return fmt.Errorf("monitor ServiceLevel and CurrentTime: %w", err)
	}
	_ = res // a rejected item shows as an unreadable level or as keep-alives
	keepAlive := uint32(max(1, 5*time.Second/max(set.PublishingInterval, time.Millisecond)))
	s.dataSub, s.link.Data, err = createSubscription(ctx, c, set.PublishingInterval, keepAlive, outlive, priorityData)
	if err != nil {
		return fmt.Errorf("create the data subscription: %w", err)
	}
	// It answers at least once per keep-alive period (a keep-alive when
	// nothing changed); three periods of silence mean it is gone.
	s.dataQuiet = 3*time.Duration(keepAlive)*set.PublishingInterval + set.HeartbeatTimeout
	s.link.settle()
	return nil
}

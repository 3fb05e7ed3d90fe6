package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// pollSubject is the poll-based client of the original ServiceLevel
// failover design, as it was measured before the Pair existed: one
// session on the active endpoint carrying the data, ServiceLevel read every
// 2 s on it (no subscription to it, no heartbeat), and every probe of the
// other endpoint a new short-lived session (connect, read, close; 15 s
// budget). Its decisions are the same servicelevel.Policy with that design's
// defaults (10 s window, 60 s dwell, 3 retries 5 s apart); with no warm
// standby it never learns the standby's level, so it always retries the
// slow way, as that design does.
func pollSubject(ctx context.Context, t slTarget, cfg benchConfig, rec *slRecorder) (func(), error) {
	pol, err := servicelevel.NewPolicy(servicelevel.FailoverConfig{})
	if err != nil {
		return nil, err
	}
	sc := &pollClient{eps: [2]string{t.endpoints()[0], t.endpoints()[1]}, rec: rec, pol: pol,
		evc: make(chan func(), 64), quit: make(chan struct{}), done: make(chan struct{})}
	for _, it := range t.items() {
		n, err := ua.ParseNodeID(it.NodeID)
		if err != nil {
			return nil, err
		}
		sc.items = append(sc.items, n)
	}
	up := make(chan struct{})
	sc.up = up
	go sc.run()
	select {
	case <-up:
		return sc.stop, nil
	case <-ctx.Done():
		sc.stop()
		return nil, ctx.Err()
	}
}

const (
	pollEvery        = 2 * time.Second
	pollProbeBudget  = 15 * time.Second
	pollPublishEvery = 100 * time.Millisecond
)

type pollClient struct {
	eps   [2]string
	items []*ua.NodeID
	rec   *slRecorder
	pol   *servicelevel.Policy
	evc   chan func()
	quit  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	up    chan struct{}

	// loop
	conn     *pollConn
	gen      int
	nextPoll time.Time
}

type pollConn struct {
	ep     servicelevel.Endpoint
	c      *opcua.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (sc *pollClient) stop() {
	sc.once.Do(func() {
		close(sc.quit)
		<-sc.done
		sc.wg.Wait()
	})
}

func (sc *pollClient) post(f func()) bool {
	select {
	case sc.evc <- f:
		return true
	case <-sc.quit:
		return false
	}
}

func (sc *pollClient) run() {
	defer close(sc.done)
	defer func() {
		if sc.conn != nil {
			sc.conn.close()
		}
	}()
	sc.exec(sc.pol.Start(time.Now()))
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wake := time.Hour
		if at, ok := sc.pol.NextDeadline(); ok {
			wake = min(wake, max(time.Until(at), 0))
		}
		if sc.conn != nil && !sc.nextPoll.IsZero() {
			wake = min(wake, max(time.Until(sc.nextPoll), 0))
		}
		t.Reset(wake)
		select {
		case <-sc.quit:
			return
		case f := <-sc.evc:
			f()
		case <-t.C:
			now := time.Now()
			if sc.conn != nil && !sc.nextPoll.IsZero() && !now.Before(sc.nextPoll) {
				sc.nextPoll = now.Add(pollEvery)
				sc.poll(sc.conn)
			}
			if at, ok := sc.pol.NextDeadline(); ok && !at.After(now) {
				sc.exec(sc.pol.Tick(now))
			}
		}
	}
}

func (sc *pollClient) exec(d servicelevel.Decision) {
	switch d.Action {
	case servicelevel.ActionProbe:
		sc.probe(d.To, d.Probe)
	case servicelevel.ActionSwitch:
		sc.rec.failover(d.Cause.String())
		sc.connect(d.To, d.DialTimeout)
	case servicelevel.ActionConnect:
		sc.connect(d.To, d.DialTimeout)
	}
}

// connect drops the current session and opens one on ep.
func (sc *pollClient) connect(ep servicelevel.Endpoint, timeout time.Duration) {
	if sc.conn != nil {
		sc.conn.close()
		sc.conn = nil
	}
	sc.gen++
	gen := sc.gen
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		conn, err := sc.dial(ep, timeout, gen)
		posted := sc.post(func() {
			if err != nil {
				sc.exec(sc.pol.ConnectFailed(time.Now()))
				return
			}
			if gen != sc.gen {
				conn.close()
				return
			}
			sc.conn = conn
			sc.exec(sc.pol.SessionUp(time.Now()))
			// The poll-based design judges the first sample of a session at once.
			sc.nextPoll = time.Now()
			if sc.up != nil {
				close(sc.up)
				sc.up = nil
			}
		})
		if !posted && err == nil {
			conn.close()
		}
	}()
}

func (sc *pollClient) dial(ep servicelevel.Endpoint, timeout time.Duration, gen int) (*pollConn, error) {
	c, err := opcua.NewClient(sc.eps[ep], opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false),
		opcua.DialTimeout(timeout), opcua.RequestTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		c.Close(ctx)
		return nil, err
	}
	var sub *ua.CreateSubscriptionResponse
	err = c.Send(ctx, &ua.CreateSubscriptionRequest{RequestedPublishingInterval: float64(pollPublishEvery / time.Millisecond),
		RequestedLifetimeCount: 600, RequestedMaxKeepAliveCount: 10, PublishingEnabled: true},
		func(v ua.Response) error { sub, _ = v.(*ua.CreateSubscriptionResponse); return nil })
	if err == nil && sub == nil {
		err = errors.New("no CreateSubscriptionResponse")
	}
	var reqs []*ua.MonitoredItemCreateRequest
	for i, n := range sc.items {
		reqs = append(reqs, &ua.MonitoredItemCreateRequest{
			ItemToMonitor:  &ua.ReadValueID{NodeID: n, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
			MonitoringMode: ua.MonitoringModeReporting,
			RequestedParameters: &ua.MonitoringParameters{ClientHandle: uint32(i), SamplingInterval: 100, QueueSize: 10,
				DiscardOldest: true, Filter: ua.NewExtensionObject(nil)},
		})
	}
	if err == nil {
		err = c.Send(ctx, &ua.CreateMonitoredItemsRequest{SubscriptionID: sub.SubscriptionID,
			TimestampsToReturn: ua.TimestampsToReturnBoth, ItemsToCreate: reqs}, func(ua.Response) error { return nil })
	}
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	cctx, ccancel := context.WithCancel(context.Background())
	conn := &pollConn{ep: ep, c: c, cancel: ccancel}
	conn.wg.Add(1)
	go func() {
		defer conn.wg.Done()
		var acks []*ua.SubscriptionAcknowledgement
		// A new monitored item's first notification is the server's
		// current value, a snapshot: after a switch it may repeat the last
		// tick the old session delivered, and that is no duplicate.
		reported := make(map[uint32]bool, len(sc.items))
		for {
			var res *ua.PublishResponse
			if acks == nil {
				acks = []*ua.SubscriptionAcknowledgement{}
			}
			err := c.Send(cctx, &ua.PublishRequest{SubscriptionAcknowledgements: acks},
				func(v ua.Response) error { res, _ = v.(*ua.PublishResponse); return nil })
			acks = nil
			if cctx.Err() != nil {
				return
			}
			if err != nil || res == nil {
				sc.post(func() {
					if sc.gen == gen && sc.conn == conn {
						sc.conn = nil
						conn.close()
						sc.exec(sc.pol.LinkLost(time.Now()))
					}
				})
				return
			}
			nm := res.NotificationMessage
			if nm == nil {
				continue
			}
			if len(nm.NotificationData) > 0 {
				acks = append(acks, &ua.SubscriptionAcknowledgement{SubscriptionID: res.SubscriptionID, SequenceNumber: nm.SequenceNumber})
			}
			for _, eo := range nm.NotificationData {
				if dcn, ok := eo.Value.(*ua.DataChangeNotification); ok {
					for _, n := range dcn.MonitoredItems {
						sc.rec.value(ep, n.ClientHandle, n.Value, !reported[n.ClientHandle])
						reported[n.ClientHandle] = true
					}
				}
			}
		}
	}()
	return conn, nil
}

func (c *pollConn) close() {
	c.cancel()
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	c.c.Close(ctx)
}

var pollServiceLevel = ua.NewNumericNodeID(0, id.Server_ServiceLevel)

func readLevel(ctx context.Context, c *opcua.Client) servicelevel.Level {
	res, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: pollServiceLevel, AttributeID: ua.AttributeIDValue}}})
	if err != nil || len(res.Results) != 1 || res.Results[0].Value == nil {
		return servicelevel.Unknown()
	}
	return servicelevel.LevelFromValue(res.Results[0].Value.Value(), res.Results[0].Status == ua.StatusOK)
}

func (sc *pollClient) poll(conn *pollConn) {
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l := readLevel(ctx, conn.c)
		sc.post(func() {
			if sc.conn == conn {
				sc.exec(sc.pol.ActiveLevel(time.Now(), l))
			}
		})
	}()
}

// probe asks ep with a session of its own, as the poll-based design does.
func (sc *pollClient) probe(ep servicelevel.Endpoint, id servicelevel.ProbeID) {
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		l := servicelevel.Unknown()
		ctx, cancel := context.WithTimeout(context.Background(), pollProbeBudget)
		defer cancel()
		c, err := opcua.NewClient(sc.eps[ep], opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false))
		if err == nil {
			if err = c.Connect(ctx); err == nil {
				l = readLevel(ctx, c)
			}
			c.Close(ctx)
		}
		sc.post(func() { sc.exec(sc.pol.ProbeResult(time.Now(), id, l)) })
	}()
}

package uaserver

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"go.uber.org/goleak"
)

// The helpers the package's tests share, one copy each: starting an OPC UA
// pair that the test's cleanup closes, and a gopcua client harness that
// records state changes and notifications.

// TestMain fails the run if any goroutine outlives the tests: the servers,
// proxies and clients started here must all be stopped by Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Node ids the tests read and monitor.
var (
	nidServiceLevel = ua.NewNumericNodeID(0, id.Server_ServiceLevel)
	nidServerArray  = ua.NewNumericNodeID(0, id.Server_ServerArray)
	nidRedundancy   = ua.NewNumericNodeID(0, id.Server_ServerRedundancy_RedundancySupport)
	nidCurrentTime  = ua.NewNumericNodeID(0, id.Server_ServerStatus_CurrentTime)
	nidState        = ua.NewNumericNodeID(0, id.Server_ServerStatus_State)
)

// startPair starts an OPC UA pair that the test's cleanup closes, and
// checks after every other cleanup that no goroutine of the pair or of the
// test's clients is left.
func startPair(t *testing.T, opts ...Option) *Pair {
	t.Helper()
	// Registered first, so it runs last: after the pair and every client
	// of the test are closed, none of their goroutines may remain.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := StartPair(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// uaClient is a gopcua client for tests, with its state changes recorded.
type uaClient struct {
	*opcua.Client
	t      *testing.T
	states chan opcua.ConnState
}

// dial connects a client with AutoReconnect off, as apbridge's supervisor
// runs them, so that a broken link shows as a state change.
func dial(t *testing.T, endpoint string, opts ...opcua.Option) *uaClient {
	t.Helper()
	c, err := tryDial(t, endpoint, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	return c
}

// tryDial is dial returning the connection error instead of failing.
func tryDial(t *testing.T, endpoint string, opts ...opcua.Option) (*uaClient, error) {
	t.Helper()
	states := make(chan opcua.ConnState, 64)
	opts = append([]opcua.Option{
		opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.AutoReconnect(false),
		opcua.DialTimeout(2 * time.Second),
		opcua.RequestTimeout(5 * time.Second),
		opcua.StateChangedCh(states),
	}, opts...)
	c, err := opcua.NewClient(endpoint, opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		c.Close(ctx)
		return nil, err
	}
	uc := &uaClient{Client: c, t: t, states: states}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	waitPublishLoopParked(t, c)
	return uc, nil
}

// waitPublishLoopParked waits until gopcua's publish loop has taken the
// pause its client is created with. The loop reads pause and resume from
// two buffered channels in one select: if the first Subscribe's resume is
// queued before the loop has run at all, the loop can take the resume
// first (ignored: not paused yet) and then the pause, and never publishes
// for that subscription (gopcua issue 895). apbridge's own client sends
// its Publish requests itself and never meets this; the test client does.
// The pause channel is unexported, so its length is read by reflection;
// a gopcua without it fails here instead of flaking later.
func waitPublishLoopParked(t *testing.T, c *opcua.Client) {
	t.Helper()
	pause := reflect.ValueOf(c).Elem().FieldByName("pausech")
	if !pause.IsValid() || pause.Kind() != reflect.Chan {
		t.Fatal("gopcua's Client has no pausech: review waitPublishLoopParked for this gopcua version")
	}
	deadline := time.Now().Add(5 * time.Second)
	for pause.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("gopcua's publish loop did not start within 5s")
		}
		runtime.Gosched()
	}
}

// read reads the Value of nids with both timestamps, failing the test on
// a service error.
func (c *uaClient) read(nids ...*ua.NodeID) []*ua.DataValue {
	c.t.Helper()
	res, err := c.tryRead(nids...)
	if err != nil {
		c.t.Fatalf("read %v: %v", nids, err)
	}
	return res
}

// tryRead is read returning the service error.
func (c *uaClient) tryRead(nids ...*ua.NodeID) ([]*ua.DataValue, error) {
	req := &ua.ReadRequest{TimestampsToReturn: ua.TimestampsToReturnBoth}
	for _, n := range nids {
		req.NodesToRead = append(req.NodesToRead, &ua.ReadValueID{NodeID: n, AttributeID: ua.AttributeIDValue})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Read(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.Results, nil
}

// level reads ServiceLevel and fails the test unless it is a Good Byte.
func (c *uaClient) level() byte {
	c.t.Helper()
	dv := c.read(nidServiceLevel)[0]
	v, ok := dv.Value.Value().(byte)
	if dv.Status != ua.StatusOK || !ok {
		c.t.Fatalf("ServiceLevel: status %v value %T", dv.Status, dv.Value.Value())
	}
	return v
}

// drainStates forgets the state changes reported so far.
func (c *uaClient) drainStates() {
	for {
		select {
		case <-c.states:
		default:
			return
		}
	}
}

// waitState waits for the client to report state want.
func (c *uaClient) waitState(want opcua.ConnState, timeout time.Duration) time.Time {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case s := <-c.states:
			if s == want {
				return time.Now()
			}
		case <-deadline:
			c.t.Fatalf("client never reached state %v (now %v)", want, c.State())
		}
	}
}

// notification is one data change a test subscription received.
type notification struct {
	handle uint32
	dv     *ua.DataValue
	at     time.Time
}

// testSub is a test subscription that collects data changes by client
// handle on a goroutine the test owns.
type testSub struct {
	*opcua.Subscription
	t        *testing.T
	ch       chan notification
	errs     chan error
	statuses chan ua.StatusCode // StatusChangeNotifications
	stop     chan struct{}
	done     chan struct{}
	handle   uint32
	// maxBytes is the largest encoded DataChangeNotification received,
	// set only when measure is.
	measure  bool
	maxBytes atomic.Int64
}

// subscribe creates a subscription with the given publishing interval.
func (c *uaClient) subscribe(interval time.Duration) *testSub {
	c.t.Helper()
	return c.subscribeMeasured(interval, false)
}

// subscribeMeasured is subscribe, recording the size of what arrives if
// measure is set.
func (c *uaClient) subscribeMeasured(interval time.Duration, measure bool) *testSub {
	c.t.Helper()
	notifs := make(chan *opcua.PublishNotificationData, 256)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, &opcua.SubscriptionParameters{Interval: interval}, notifs)
	if err != nil {
		c.t.Fatalf("subscribe: %v", err)
	}
	s := &testSub{Subscription: sub, t: c.t, ch: make(chan notification, 1<<16), errs: make(chan error, 16),
		statuses: make(chan ua.StatusCode, 16), stop: make(chan struct{}), done: make(chan struct{}), measure: measure}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case n := <-notifs:
				now := time.Now()
				if n.Error != nil {
					select {
					case s.errs <- n.Error:
					default:
					}
					continue
				}
				if sc, ok := n.Value.(*ua.StatusChangeNotification); ok {
					select {
					case s.statuses <- sc.Status:
					default:
					}
				}
				if dcn, ok := n.Value.(*ua.DataChangeNotification); ok {
					if s.measure {
						if b, err := ua.Encode(dcn); err == nil && int64(len(b)) > s.maxBytes.Load() {
							s.maxBytes.Store(int64(len(b)))
						}
					}
					for _, it := range dcn.MonitoredItems {
						select {
						case s.ch <- notification{it.ClientHandle, it.Value, now}:
						default:
							c.t.Error("test subscription buffer full")
						}
					}
				}
			}
		}
	}()
	c.t.Cleanup(func() {
		close(s.stop)
		<-s.done
	})
	return s
}

// monitor adds items and returns their client handles.
func (s *testSub) monitor(queue uint32, nids ...*ua.NodeID) []uint32 {
	s.t.Helper()
	var reqs []*ua.MonitoredItemCreateRequest
	var handles []uint32
	for _, n := range nids {
		s.handle++
		r := opcua.NewMonitoredItemCreateRequestWithDefaults(n, ua.AttributeIDValue, s.handle)
		r.RequestedParameters.QueueSize = queue
		reqs = append(reqs, r)
		handles = append(handles, s.handle)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := s.Monitor(ctx, ua.TimestampsToReturnBoth, reqs...)
	if err != nil {
		s.t.Fatalf("monitor: %v", err)
	}
	for i, r := range res.Results {
		if r.StatusCode != ua.StatusOK {
			s.t.Fatalf("monitor %v: %v", nids[i], r.StatusCode)
		}
	}
	return handles
}

// next returns the next notification for handle, skipping others.
func (s *testSub) next(handle uint32, timeout time.Duration) notification {
	s.t.Helper()
	n, ok := s.tryNext(handle, timeout)
	if !ok {
		// What gopcua's publish loop reported says whether the server or
		// the client stopped.
		var errs []error
		for len(s.errs) > 0 {
			errs = append(errs, <-s.errs)
		}
		s.t.Fatalf("no notification for handle %d within %v (subscription errors: %v)", handle, timeout, errs)
	}
	return n
}

// tryNext is next reporting a timeout instead of failing.
func (s *testSub) tryNext(handle uint32, timeout time.Duration) (notification, bool) {
	deadline := time.After(timeout)
	for {
		select {
		case n := <-s.ch:
			if n.handle == handle {
				return n, true
			}
		case <-deadline:
			return notification{}, false
		}
	}
}

// waitValue waits for a notification of handle whose value satisfies ok.
func (s *testSub) waitValue(handle uint32, timeout time.Duration, ok func(*ua.DataValue) bool) notification {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, got := s.tryNext(handle, time.Until(deadline))
		if !got {
			s.t.Fatalf("no matching notification for handle %d within %v", handle, timeout)
		}
		if ok(n.dv) {
			return n
		}
	}
}

// isLevel matches a DataValue carrying ServiceLevel l as a Byte.
func isLevel(l byte) func(*ua.DataValue) bool {
	return func(dv *ua.DataValue) bool { v, _ := dv.Value.Value().(byte); return v == l }
}

// writeReq writes v to the Value of nid.
func writeReq(nid *ua.NodeID, v any) *ua.WriteRequest {
	return &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: nid, AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(v)},
	}}}
}

// write writes v to nid and returns the operation's status.
func (c *uaClient) write(nid *ua.NodeID, v any) ua.StatusCode {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Write(ctx, writeReq(nid, v))
	if err != nil {
		c.t.Fatalf("write %v: %v", nid, err)
	}
	return res.Results[0]
}

// refuses reports whether nothing listens on an opc.tcp endpoint.
func refuses(t *testing.T, endpoint string) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "opc.tcp://"), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// ctx5s is a context that ends after 5 s or with the test.
func ctx5s(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"go.uber.org/goleak"
)

var (
	nidServiceLevel = ua.NewNumericNodeID(0, id.Server_ServiceLevel)
	nidServerArray  = ua.NewNumericNodeID(0, id.Server_ServerArray)
	nidRedundancy   = ua.NewNumericNodeID(0, id.Server_ServerRedundancy_RedundancySupport)
	nidCurrentTime  = ua.NewNumericNodeID(0, id.Server_ServerStatus_CurrentTime)
	nidState        = ua.NewNumericNodeID(0, id.Server_ServerStatus_State)
)

func startPair(t *testing.T, opts ...OPCUAOption) *OPCUAPair {
	t.Helper()
	// Registered first, so it runs last: after the pair and every client
	// of the test are closed, none of their goroutines may remain.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := StartOPCUAPair(ctx, opts...)
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
	return uc, nil
}

func (c *uaClient) read(nids ...*ua.NodeID) []*ua.DataValue {
	c.t.Helper()
	res, err := c.tryRead(nids...)
	if err != nil {
		c.t.Fatalf("read %v: %v", nids, err)
	}
	return res
}

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

func isLevel(l byte) func(*ua.DataValue) bool {
	return func(dv *ua.DataValue) bool { v, _ := dv.Value.Value().(byte); return v == l }
}

func TestOPCUAPairServesRedundancyNodes(t *testing.T) {
	p := startPair(t)
	if p.A().Endpoint() == p.B().Endpoint() {
		t.Fatal("both servers have one endpoint")
	}
	for i, s := range p.Servers() {
		if s.Proxy() == nil || "opc.tcp://"+s.Proxy().Addr() != s.Endpoint() {
			t.Fatalf("%s: endpoint %s does not go through its proxy", s.Name(), s.Endpoint())
		}
		c := dial(t, s.Endpoint())
		want := []byte{LevelPrimary, LevelHealthyFollower}[i]
		if got := c.level(); got != want {
			t.Errorf("%s: ServiceLevel %d, want %d", s.Name(), got, want)
		}
		res := c.read(nidServerArray, nidRedundancy, nidState)
		uris, _ := res[0].Value.Value().([]string)
		if !slices.Equal(uris, []string{s.ApplicationURI(), p.Server(1 - i).ApplicationURI()}) {
			t.Errorf("%s: ServerArray %v", s.Name(), uris)
		}
		if v, _ := res[1].Value.Value().(int32); ua.RedundancySupport(v) != ua.RedundancySupportWarm {
			t.Errorf("%s: RedundancySupport %v", s.Name(), res[1].Value.Value())
		}
		if v, _ := res[2].Value.Value().(int32); ua.ServerState(v) != ua.ServerStateRunning {
			t.Errorf("%s: State %v", s.Name(), res[2].Value.Value())
		}
		// CurrentTime ticks.
		t1, _ := c.read(nidCurrentTime)[0].Value.Value().(time.Time)
		deadline := time.Now().Add(2 * time.Second)
		for {
			t2, _ := c.read(nidCurrentTime)[0].Value.Value().(time.Time)
			if t2.After(t1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: CurrentTime stuck at %v", s.Name(), t1)
			}
		}
		// Discovery hands out the proxy's URL and the ApplicationUri.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		eps, err := opcua.GetEndpoints(ctx, s.Endpoint())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 1 || eps[0].EndpointURL != s.Endpoint() || eps[0].Server.ApplicationURI != s.ApplicationURI() {
			t.Fatalf("%s: endpoints %+v", s.Name(), eps)
		}
	}
}

func TestOPCUAServiceLevelChangeReachesSubscriber(t *testing.T) {
	p := startPair(t)
	c := dial(t, p.A().Endpoint())
	const interval = 100 * time.Millisecond
	sub := c.subscribe(interval)
	h := sub.monitor(1, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelPrimary)) // the initial value
	var worst time.Duration
	for _, l := range []byte{LevelStandby, LevelPrimary, 180, 0, LevelHealthyFollower} {
		start := time.Now()
		p.A().SetLevel(l)
		n := sub.waitValue(h, 2*time.Second, isLevel(l))
		lat := n.at.Sub(start)
		worst = max(worst, lat)
		if n.dv.SourceTimestamp.Before(start.Add(-time.Millisecond)) || n.dv.Status != ua.StatusOK {
			t.Errorf("level %d: source timestamp %v before the change at %v, status %v", l, n.dv.SourceTimestamp, start, n.dv.Status)
		}
	}
	t.Logf("ServiceLevel change to subscriber, %v publishing interval: worst %v", interval, worst)
	// One publishing interval, plus slack for a loaded machine running -race.
	if worst > interval+100*time.Millisecond {
		t.Errorf("a ServiceLevel change took %v to arrive with a %v publishing interval", worst, interval)
	}
	p.A().Promote()
	p.A().Demote()
	if got := c.level(); got != LevelStandby {
		t.Fatalf("after Promote, Demote: level %d", got)
	}
}

// tagSeen is what one server said about a tag at one tick.
type tagSeen struct {
	value any
	src   time.Time
}

func TestOPCUATagsAreIdenticalOnBothServers(t *testing.T) {
	p := startPair(t, WithTags(12), WithTagInterval(50*time.Millisecond))
	tags := p.Tags()[:12]
	nids := make([]*ua.NodeID, len(tags))
	for i, tg := range tags {
		nids[i] = tg.NodeID()
	}
	const ticks = 15
	// seen[server][tag][tick]
	seen := make([][]map[uint64]tagSeen, 2)
	// Subscribe on both servers first so that they watch the same ticks.
	subs := make([]*testSub, 2)
	handleSets := make([][]uint32, 2)
	for si, s := range p.Servers() {
		c := dial(t, s.Endpoint())
		// Publishing faster than the process ticks, with a queue, so that
		// a counter must show every tick.
		subs[si] = c.subscribe(20 * time.Millisecond)
		handleSets[si] = subs[si].monitor(4, nids...)
	}
	for si, s := range p.Servers() {
		sub, handles := subs[si], handleSets[si]
		byHandle := map[uint32]int{}
		for i, h := range handles {
			byHandle[h] = i
		}
		var got []notification
		deadline := time.After(10 * time.Second)
		counters := 0
		for counters < ticks*3 {
			select {
			case n := <-sub.ch:
				got = append(got, n)
				if tags[byHandle[n.handle]].Kind == TagCounter {
					counters++
				}
			case <-deadline:
				t.Fatalf("%s: only %d counter notifications", s.Name(), counters)
			}
		}
		// Counters name the tick their source timestamp belongs to.
		tickAt := map[time.Time]uint64{}
		last := map[int]int64{}
		for _, n := range got {
			i := byHandle[n.handle]
			if tags[i].Kind != TagCounter {
				continue
			}
			k, _ := n.dv.Value.Value().(int64)
			if n.dv.SourceTimestamp.IsZero() || n.dv.Status != ua.StatusOK {
				t.Fatalf("%s %s: status %v source timestamp %v", s.Name(), tags[i].Name, n.dv.Status, n.dv.SourceTimestamp)
			}
			if prev, ok := last[i]; ok && k != prev+1 {
				t.Errorf("%s %s: counter went %d -> %d, an update was lost", s.Name(), tags[i].Name, prev, k)
			}
			last[i] = k
			tickAt[n.dv.SourceTimestamp] = uint64(k)
		}
		seen[si] = make([]map[uint64]tagSeen, len(tags))
		for i := range tags {
			seen[si][i] = map[uint64]tagSeen{}
		}
		for _, n := range got {
			i := byHandle[n.handle]
			k, ok := tickAt[n.dv.SourceTimestamp]
			if !ok {
				continue // the initial value of a tag, before its counter's first
			}
			v := n.dv.Value.Value()
			if want := tags[i].ValueAt(k); v != want {
				t.Errorf("%s %s at tick %d: %v, want %v", s.Name(), tags[i].Name, k, v, want)
			}
			seen[si][i][k] = tagSeen{v, n.dv.SourceTimestamp}
		}
	}
	common := 0
	for i, tg := range tags {
		for k, a := range seen[0][i] {
			b, ok := seen[1][i][k]
			if !ok {
				continue
			}
			common++
			if a.value != b.value || !a.src.Equal(b.src) {
				t.Errorf("%s at tick %d: A says %v@%v, B says %v@%v", tg.Name, k, a.value, a.src, b.value, b.src)
			}
		}
	}
	if common < ticks {
		t.Fatalf("only %d tag values seen on both servers", common)
	}
}

func TestOPCUAStandbyServesBadOutOfService(t *testing.T) {
	p := startPair(t, WithTagInterval(time.Hour)) // values stay put: only the status moves
	counter := p.Tags()[0].NodeID()
	b := dial(t, p.B().Endpoint())
	sub := b.subscribe(50 * time.Millisecond)
	h := sub.monitor(1, counter)[0]
	if n := sub.next(h, 5*time.Second); n.dv.Status != ua.StatusOK {
		t.Fatalf("B at %d: status %v", p.B().Level(), n.dv.Status)
	}
	p.B().Demote()
	n := sub.next(h, 5*time.Second)
	if n.dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("B at 90: status %v, want Bad_OutOfService", n.dv.Status)
	}
	if n.dv.Value == nil || n.dv.Value.Value() == nil {
		t.Fatal("B at 90: Bad_OutOfService came without the value")
	}
	if dv := b.read(counter)[0]; dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("read on B at 90: %v", dv.Status)
	}
	a := dial(t, p.A().Endpoint())
	if dv := a.read(counter)[0]; dv.Status != ua.StatusOK {
		t.Fatalf("read on A at 250: %v", dv.Status)
	}
	p.B().SetLevel(199)
	if dv := b.read(counter)[0]; dv.Status != ua.StatusBadOutOfService {
		t.Fatalf("read on B at 199: %v", dv.Status)
	}
	p.B().SetLevel(200)
	if n := sub.next(h, 5*time.Second); n.dv.Status != ua.StatusOK {
		t.Fatalf("B back at 200: status %v", n.dv.Status)
	}
	// ServiceLevel itself is always Good.
	p.B().SetLevel(0)
	if dv := b.read(nidServiceLevel)[0]; dv.Status != ua.StatusOK {
		t.Fatalf("ServiceLevel at 0: %v", dv.Status)
	}
}

func writeReq(nid *ua.NodeID, v any) *ua.WriteRequest {
	return &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: nid, AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(v)},
	}}}
}

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

func TestOPCUAWritesLandOnBothServers(t *testing.T) {
	p := startPair(t)
	sp := p.Setpoints()[1]
	a, b := dial(t, p.A().Endpoint()), dial(t, p.B().Endpoint())
	sub := b.subscribe(50 * time.Millisecond)
	h := sub.monitor(1, sp.NodeID())[0]
	sub.next(h, 2*time.Second) // initial 0
	if code := a.write(sp.NodeID(), 42.5); code != ua.StatusOK {
		t.Fatalf("write on A: %v", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, err := p.WaitWrites(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[0]; w.Server != "A" || w.Tag != sp.Name || w.Value != 42.5 || w.At.IsZero() {
		t.Fatalf("write recorded as %+v", w)
	}
	if v, ok := p.Setpoint(sp.Name); !ok || v != 42.5 {
		t.Fatalf("Setpoint(%s) = %v, %v", sp.Name, v, ok)
	}
	if v, _ := b.read(sp.NodeID())[0].Value.Value().(float64); v != 42.5 {
		t.Fatalf("B reads %v after the write on A", v)
	}
	if n := sub.next(h, 2*time.Second); n.dv.Value.Value() != 42.5 {
		t.Fatalf("B's subscriber got %v", n.dv.Value.Value())
	}
	// What a server refuses, per operation, without breaking the session.
	for _, tc := range []struct {
		name string
		nid  *ua.NodeID
		v    any
		want ua.StatusCode
	}{
		{"counter", p.Tags()[0].NodeID(), 1.0, ua.StatusBadNotWritable},
		{"int32 into a Double", sp.NodeID(), int32(3), ua.StatusBadTypeMismatch},
		{"unknown namespace", ua.NewStringNodeID(42, "nope"), 1.0, ua.StatusBadNodeIDUnknown},
		{"ServiceLevel", nidServiceLevel, byte(0), ua.StatusBadNotWritable},
	} {
		if code := a.write(tc.nid, tc.v); code != tc.want {
			t.Errorf("write %s: %v, want %v", tc.name, code, tc.want)
		}
	}
	p.B().Demote()
	if code := b.write(sp.NodeID(), 7.0); code != ua.StatusBadOutOfService {
		t.Errorf("write on a standby: %v, want Bad_OutOfService", code)
	}
	if n := len(p.Writes()); n != 1 {
		t.Fatalf("%d writes recorded, want 1", n)
	}
	if got := a.level(); got != LevelPrimary {
		t.Fatalf("A after refused writes: level %d", got)
	}
}

func TestOPCUALevelFuncComputesFromHealth(t *testing.T) {
	p := startPair(t)
	// A stand-in for seed 004's calculator.
	calc := func(h Health) byte {
		switch {
		case !h.MemberUp:
			return 0
		case !h.StoreReachable && h.Stale:
			return 100
		case h.Stale:
			return 200
		case h.Primary:
			return 250
		default:
			return 240
		}
	}
	s := p.B()
	s.SetLevelFunc(calc)
	if s.Level() != 240 {
		t.Fatalf("B as a healthy follower: %d", s.Level())
	}
	if l := s.UpdateHealth(func(h *Health) { h.Primary = true }); l != 250 {
		t.Fatalf("B as primary: %d", l)
	}
	if l := s.UpdateHealth(func(h *Health) { h.Stale, h.StoreReachable = true, false }); l != 100 {
		t.Fatalf("B stale without its store: %d", l)
	}
	c := dial(t, s.Endpoint())
	if got := c.level(); got != 100 {
		t.Fatalf("B serves %d", got)
	}
	s.SetLevelFunc(nil)
	s.UpdateHealth(func(h *Health) { h.MemberUp = false })
	if s.Level() != 100 {
		t.Fatalf("manual again, but the level moved to %d", s.Level())
	}
	if h := s.Health(); h.MemberUp || !h.Stale || !h.Primary {
		t.Fatalf("health %+v", h)
	}
}

func TestOPCUALevelEncodingFaults(t *testing.T) {
	p := startPair(t)
	s := p.B()
	c := dial(t, s.Endpoint())
	sub := c.subscribe(20 * time.Millisecond)
	h := sub.monitor(1, nidServiceLevel)[0]
	sub.waitValue(h, 2*time.Second, isLevel(LevelHealthyFollower))
	for _, tc := range []struct {
		enc  LevelEncoding
		want func(*ua.DataValue) bool
	}{
		{LevelAsInt32, func(dv *ua.DataValue) bool {
			v, ok := dv.Value.Value().(int32)
			return ok && v == int32(LevelHealthyFollower) && dv.Status == ua.StatusOK
		}},
		{LevelNoValue, func(dv *ua.DataValue) bool {
			return dv.Status == ua.StatusOK && (dv.Value == nil || dv.Value.Value() == nil)
		}},
		{LevelBadStatus, func(dv *ua.DataValue) bool { return dv.Status == ua.StatusBadWaitingForInitialData }},
		{LevelAsByte, isLevel(LevelHealthyFollower)},
	} {
		s.SetLevelEncoding(tc.enc)
		if dv := c.read(nidServiceLevel)[0]; !tc.want(dv) {
			t.Errorf("encoding %d: read %+v", tc.enc, dv)
		}
		sub.waitValue(h, 2*time.Second, tc.want) // subscribers get the change
	}
	// A restart keeps the encoding, and readiness does not wait for a Byte.
	s.SetLevelEncoding(LevelAsInt32)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Restart(ctx, LevelPrimary); err != nil {
		t.Fatal(err)
	}
	if v, ok := dial(t, s.Endpoint()).read(nidServiceLevel)[0].Value.Value().(int32); !ok || v != int32(LevelPrimary) {
		t.Fatalf("after restart: %v", v)
	}
}

var (
	_ = errors.Is
	_ = fmt.Sprint
	_ = net.Dial
	_ sync.Mutex
	_ = syscall.ECONNREFUSED
)

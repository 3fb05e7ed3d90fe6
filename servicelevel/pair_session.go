package servicelevel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// Client handles of the health subscription's items. The data items live
// in another subscription, so these never collide with the user's.
const (
	handleServiceLevel uint32 = 1
	handleCurrentTime  uint32 = 2
)

// batch bounds the operations per request, so that every request and
// response fits a 64 KiB chunk.
const batch = 500

// publishers is how many Publish requests each session keeps outstanding:
// two, so that the server always holds one when a publishing cycle is due
// while the answer to the other travels.
const publishers = 2

// The nodes the Pair reads itself; new each time, since a NodeID is
// mutable and requests run concurrently.
func nodeServiceLevel() *ua.NodeID { return ua.NewNumericNodeID(0, id.Server_ServiceLevel) }

func nodeCurrentTime() *ua.NodeID { return ua.NewNumericNodeID(0, id.Server_ServerStatus_CurrentTime) }

// session is one gopcua client on one endpoint, with its subscriptions and
// goroutines. The Pair's loop owns the fields marked "loop"; the session's
// own goroutines own the rest, and they talk to the loop only through
// events. The gopcua client is never closed while a request of ours is in
// flight on it: every request runs between acquire and release, and run
// closes the client only after waiting for them.
type session struct {
	p           *Pair
	ep          Endpoint
	url         string
	id          uint64
	ctx         context.Context
	cancel      context.CancelFunc
	dialTimeout time.Duration
	polite      atomic.Bool // close the OPC UA session rather than just the socket

	// Set by run before it posts evConnected; read-only afterwards.
	c         *opcua.Client
	healthSub uint32
	dataSub   uint32
	dataQuiet time.Duration // the data subscription's allowed silence
	initial   *ua.DataValue // the first ServiceLevel read
	upAt      time.Time

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup // children: publishers, worker, reads, writes

	wmu  sync.Mutex
	want *desire
	kick chan struct{}

	amu  sync.Mutex
	acks []*ua.SubscriptionAcknowledgement

	// loop
	state         SessionState
	dead          bool
	level         Level
	sampled       bool
	levelProblem  string
	lastBeat      time.Time // last answer of the health subscription
	lastData      time.Time // last answer of the data subscription
	nextPoll      time.Time
	polling       bool
	activateOnUp  bool
	activating    bool
	activateCause Cause
	activateAt    time.Time
	activationVer uint64
	wantVer       uint64 // version of the last desire sent
	serving       bool
	buffered      []dataNote
	fence         map[uint32]*ua.DataValue
	attempt       int
}

// dataNote is one data notification, with when its response arrived.
type dataNote struct {
	handle uint32
	dv     *ua.DataValue
	at     time.Time
}

// desire is the item state a session must reach: every item of the list
// in the given monitoring mode, and nothing else. A newer desire replaces
// an older one that the worker has not taken yet.
type desire struct {
	version  uint64
	items    []itemSpec
	mode     ua.MonitoringMode
	snapshot bool // read the current value of every item afterwards
}

// itemSpec is a registered data item, as the Pair monitors it.
type itemSpec struct {
	handle   uint32
	node     *ua.NodeID
	nodeStr  string
	sampling time.Duration
	queue    uint32
}

func (a itemSpec) same(b itemSpec) bool {
	return a.handle == b.handle && a.nodeStr == b.nodeStr && a.sampling == b.sampling && a.queue == b.queue
}

func newSession(p *Pair, ep Endpoint, id uint64, dialTimeout time.Duration) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		p: p, ep: ep, url: p.set.Endpoints[ep], id: id,
		ctx: ctx, cancel: cancel, dialTimeout: dialTimeout,
		kick:  make(chan struct{}, 1),
		state: SessionConnecting,
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
		for range publishers {
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
		closeClient(s.c, s.polite.Load())
	}
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

func (s *session) clientOptions() []opcua.Option {
	o := &s.p.opt
	opts := []opcua.Option{
		opcua.SecurityMode(ua.MessageSecurityModeNone),
		opcua.RequestTimeout(10 * time.Second),
		opcua.SessionTimeout(30 * time.Second),
		opcua.DialTimeout(s.dialTimeout),
	}
	opts = append(opts, o.clientOpts...)
	opts = append(opts, o.endpOpts[s.ep]...)
	return append(opts,
		opcua.AutoReconnect(false),
		opcua.StateChangedCh(nil),
		opcua.SessionName(o.name+"-"+s.ep.String()),
	)
}

// connect dials the endpoint within the dial timeout, then creates the
// health subscription (ServiceLevel and CurrentTime), the data
// subscription (empty until items are wanted) and reads the level once,
// within the connect timeout.
func (s *session) connect() error {
	c, err := opcua.NewClient(s.url, s.clientOptions()...)
	if err != nil {
		return fmt.Errorf("client options: %w", err)
	}
	dctx, dcancel := context.WithTimeout(s.ctx, s.dialTimeout)
	err = c.Connect(dctx)
	dcancel()
	if err != nil {
		closeClient(c, false)
		return err
	}
	set := &s.p.set
	ctx, cancel := context.WithTimeout(s.ctx, set.Failover.ConnectTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		closeClient(c, false)
		return fmt.Errorf("%s: %w", what, err)
	}
	// Keep-alive count 1: every cycle of the health subscription answers,
	// with a CurrentTime change or a keep-alive, so that the gap check
	// works even on a server that does not let CurrentTime be monitored.
	s.healthSub, err = createSubscription(ctx, c, set.HeartbeatInterval, 1)
	if err != nil {
		return fail("create the health subscription", err)
	}
	hb := msFloat(set.HeartbeatInterval)
	res, err := createItems(ctx, c, s.healthSub, []*ua.MonitoredItemCreateRequest{
		monitorRequest(nodeServiceLevel(), handleServiceLevel, hb, 1, ua.MonitoringModeReporting),
		monitorRequest(nodeCurrentTime(), handleCurrentTime, hb, 1, ua.MonitoringModeReporting),
	})
	if err != nil {
		return fail("monitor ServiceLevel and CurrentTime", err)
	}
	_ = res // a rejected item shows as an unreadable level or as keep-alives
	keepAlive := uint32(max(1, 5*time.Second/max(set.PublishingInterval, time.Millisecond)))
	s.dataSub, err = createSubscription(ctx, c, set.PublishingInterval, keepAlive)
	if err != nil {
		return fail("create the data subscription", err)
	}
	// It answers at least once per keep-alive period (a keep-alive when
	// nothing changed); three periods of silence mean it is gone.
	s.dataQuiet = 3*time.Duration(keepAlive)*set.PublishingInterval + set.HeartbeatTimeout
	rctx, rcancel := context.WithTimeout(s.ctx, set.ReadTimeout)
	s.initial, err = readValue(rctx, c, nodeServiceLevel())
	rcancel()
	if err != nil {
		return fail("read ServiceLevel", err)
	}
	s.c = c
	s.upAt = time.Now()
	return nil
}

// ---- requests ----

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// send sends req and stores the response in *res, which must be a pointer
// to the response type.
func send[T ua.Response](ctx context.Context, c *opcua.Client, req ua.Request) (T, error) {
	var res T
	err := c.Send(ctx, req, func(v ua.Response) error {
		r, ok := v.(T)
		if !ok {
			return fmt.Errorf("got %T in answer to %T", v, req)
		}
		res = r
		return nil
	})
	return res, err
}

func createSubscription(ctx context.Context, c *opcua.Client, interval time.Duration, keepAlive uint32) (uint32, error) {
	// The lifetime lets the subscription outlive a minute without Publish
	// requests (a slow consumer), and at least three keep-alive periods.
	lifetime := uint32(max(3*int64(keepAlive), int64(time.Minute/max(interval, time.Millisecond))))
	res, err := send[*ua.CreateSubscriptionResponse](ctx, c, &ua.CreateSubscriptionRequest{
		RequestedPublishingInterval: msFloat(interval),
		RequestedLifetimeCount:      lifetime,
		RequestedMaxKeepAliveCount:  keepAlive,
		PublishingEnabled:           true,
	})
	if err != nil {
		return 0, err
	}
	return res.SubscriptionID, nil
}

func monitorRequest(node *ua.NodeID, handle uint32, samplingMS float64, queue uint32, mode ua.MonitoringMode) *ua.MonitoredItemCreateRequest {
	return &ua.MonitoredItemCreateRequest{
		ItemToMonitor:  &ua.ReadValueID{NodeID: node, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
		MonitoringMode: mode,
		RequestedParameters: &ua.MonitoringParameters{
			ClientHandle:     handle,
			SamplingInterval: samplingMS,
			QueueSize:        queue,
			DiscardOldest:    true,
			Filter:           ua.NewExtensionObject(nil),
		},
	}
}

func createItems(ctx context.Context, c *opcua.Client, sub uint32, reqs []*ua.MonitoredItemCreateRequest) ([]*ua.MonitoredItemCreateResult, error) {
	res, err := send[*ua.CreateMonitoredItemsResponse](ctx, c, &ua.CreateMonitoredItemsRequest{
		SubscriptionID:     sub,
		TimestampsToReturn: ua.TimestampsToReturnBoth,
		ItemsToCreate:      reqs,
	})
	if err != nil {
		return nil, err
	}
	if len(res.Results) != len(reqs) {
		return nil, fmt.Errorf("CreateMonitoredItems answered %d results for %d items", len(res.Results), len(reqs))
	}
	return res.Results, nil
}

func readValues(ctx context.Context, c *opcua.Client, nodes []*ua.NodeID) ([]*ua.DataValue, error) {
	rv := make([]*ua.ReadValueID, len(nodes))
	for i, n := range nodes {
		rv[i] = &ua.ReadValueID{NodeID: n, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}}
	}
	res, err := send[*ua.ReadResponse](ctx, c, &ua.ReadRequest{NodesToRead: rv, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil {
		return nil, err
	}
	if len(res.Results) != len(nodes) {
		return nil, fmt.Errorf("servicelevel: the Read answered %d results for %d nodes", len(res.Results), len(nodes))
	}
	return res.Results, nil
}

func readValue(ctx context.Context, c *opcua.Client, node *ua.NodeID) (*ua.DataValue, error) {
	dvs, err := readValues(ctx, c, []*ua.NodeID{node})
	if err != nil {
		return nil, err
	}
	return dvs[0], nil
}

// levelOf maps a ServiceLevel DataValue to a Level, and says why it is
// Unknown when it is.
func levelOf(dv *ua.DataValue) (Level, string) {
	if dv == nil {
		return Unknown(), "no value returned"
	}
	if dv.Status != ua.StatusOK {
		return Unknown(), "status " + dv.Status.Error()
	}
	var v any
	if dv.Value != nil {
		v = dv.Value.Value()
	}
	if v == nil {
		return Unknown(), "the server has no value"
	}
	l := LevelFromValue(v, true)
	if !l.Known() {
		return l, fmt.Sprintf("value is %T, not a Byte", v)
	}
	return l, ""
}

// ---- publishing ----

func (s *session) takeAcks() []*ua.SubscriptionAcknowledgement {
	s.amu.Lock()
	defer s.amu.Unlock()
	a := s.acks
	s.acks = nil
	if a == nil {
		a = []*ua.SubscriptionAcknowledgement{}
	}
	return a
}

func (s *session) ack(sub, seq uint32) {
	s.amu.Lock()
	s.acks = append(s.acks, &ua.SubscriptionAcknowledgement{SubscriptionID: sub, SequenceNumber: seq})
	s.amu.Unlock()
}

// publisher keeps one Publish request outstanding and hands every answer
// to the loop. It replaces gopcua's publish loop, whose pause and resume
// signals can arrive out of order and which blocks on an undrained
// notification channel: this one never blocks on anything but the server
// and the Pair's backlog limit.
func (s *session) publisher() {
	for {
		if s.p.out.waitRoom(s.ctx) != nil {
			return
		}
		res, err := send[*ua.PublishResponse](s.ctx, s.c, &ua.PublishRequest{SubscriptionAcknowledgements: s.takeAcks()})
		at := time.Now()
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			s.p.post(evSessionErr{s: s, err: fmt.Errorf("publish: %w", err)})
			return
		}
		ev := evPublish{s: s, sub: res.SubscriptionID, at: at}
		if nm := res.NotificationMessage; nm != nil {
			if len(nm.NotificationData) > 0 {
				s.ack(res.SubscriptionID, nm.SequenceNumber)
			}
			for _, eo := range nm.NotificationData {
				if eo == nil {
					continue
				}
				switch v := eo.Value.(type) {
				case *ua.DataChangeNotification:
					for _, n := range v.MonitoredItems {
						if n != nil && n.Value != nil {
							ev.notes = append(ev.notes, dataNote{handle: n.ClientHandle, dv: n.Value, at: at})
						}
					}
				case *ua.StatusChangeNotification:
					ev.status = v.Status
					ev.statusChange = true
				}
			}
		}
		if !s.p.post(ev) {
			return
		}
	}
}

// ---- reads ----

type readKind uint8

const (
	readPoll readKind = iota
	readProbe
)

// read reads ServiceLevel within the read timeout and posts the answer.
// It returns false if the session is closing (nothing is posted then).
func (s *session) read(kind readKind, probe ProbeID) bool {
	if !s.acquire() {
		return false
	}
	timeout := s.p.set.ReadTimeout
	go func() {
		defer s.release()
		ctx, cancel := context.WithTimeout(s.ctx, timeout)
		defer cancel()
		dv, err := readValue(ctx, s.c, nodeServiceLevel())
		if err != nil && s.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("ServiceLevel read past its %v deadline", timeout)
		}
		s.p.post(evRead{s: s, kind: kind, probe: probe, dv: dv, err: err})
	}()
	return true
}

// ---- items ----

func (s *session) setDesire(d desire) {
	s.wmu.Lock()
	if s.want != nil && s.want.snapshot {
		d.snapshot = true
	}
	s.want = &d
	s.wmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *session) takeDesire() *desire {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	d := s.want
	s.want = nil
	return d
}

type monItem struct {
	id   uint32
	mode ua.MonitoringMode
	spec itemSpec
}

type failedItem struct {
	spec   itemSpec
	status ua.StatusCode
}

// snapValue is one item's value in a snapshot.
type snapValue struct {
	handle uint32
	dv     *ua.DataValue
}

// worker brings the session's data items to the latest desire, one desire
// at a time, so that item changes on one session never interleave.
func (s *session) worker() {
	have := map[uint32]*monItem{}
	failed := map[uint32]failedItem{}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		}
		for d := s.takeDesire(); d != nil; d = s.takeDesire() {
			res := s.reconcile(d, have, failed)
			if !s.p.post(res) || res.err != nil {
				return
			}
		}
	}
}

func (s *session) reconcile(d *desire, have map[uint32]*monItem, failed map[uint32]failedItem) evReconciled {
	res := evReconciled{s: s, version: d.version, status: make(map[uint32]ua.StatusCode, len(d.items))}
	ctx, cancel := context.WithTimeout(s.ctx, s.p.set.Failover.ConnectTimeout)
	defer cancel()
	wanted := make(map[uint32]itemSpec, len(d.items))
	for _, it := range d.items {
		wanted[it.handle] = it
	}

	// Items no longer wanted, or wanted differently, go.
	var del []uint32
	for h, m := range have {
		if w, ok := wanted[h]; !ok || !w.same(m.spec) {
			del = append(del, m.id)
			delete(have, h)
		}
	}
	for h, f := range failed {
		if w, ok := wanted[h]; !ok || !w.same(f.spec) {
			delete(failed, h)
		}
	}
	slices.Sort(del)
	for chunk := range slices.Chunk(del, batch) {
		if _, err := send[*ua.DeleteMonitoredItemsResponse](ctx, s.c, &ua.DeleteMonitoredItemsRequest{
			SubscriptionID: s.dataSub, MonitoredItemIDs: chunk,
		}); err != nil {
			res.err = fmt.Errorf("delete monitored items: %w", err)
			return res
		}
	}

	// New items are created in the wanted mode.
	var create []itemSpec
	for _, it := range d.items {
		if _, ok := have[it.handle]; ok {
			continue
		}
		if _, ok := failed[it.handle]; ok {
			continue
		}
		create = append(create, it)
	}
	for chunk := range slices.Chunk(create, batch) {
		reqs := make([]*ua.MonitoredItemCreateRequest, len(chunk))
		for i, it := range chunk {
			reqs[i] = monitorRequest(it.node, it.handle, msFloat(it.sampling), it.queue, d.mode)
		}
		results, err := createItems(ctx, s.c, s.dataSub, reqs)
		if err != nil {
			res.err = fmt.Errorf("create monitored items: %w", err)
			return res
		}
		for i, r := range results {
			it := chunk[i]
			code := ua.StatusBadInternalError
			if r != nil {
				code = r.StatusCode
			}
			if code != ua.StatusOK {
				failed[it.handle] = failedItem{spec: it, status: code}
				continue
			}
			have[it.handle] = &monItem{id: r.MonitoredItemID, mode: d.mode, spec: it}
		}
	}

	// Items in the other mode switch (a promotion or demotion in Hot mode).
	var switching []uint32
	for _, m := range have {
		if m.mode != d.mode {
			switching = append(switching, m.id)
		}
	}
	slices.Sort(switching)
	for chunk := range slices.Chunk(switching, batch) {
		if _, err := send[*ua.SetMonitoringModeResponse](ctx, s.c, &ua.SetMonitoringModeRequest{
			SubscriptionID: s.dataSub, MonitoringMode: d.mode, MonitoredItemIDs: chunk,
		}); err != nil {
			res.err = fmt.Errorf("set monitoring mode %v: %w", d.mode, err)
			return res
		}
	}
	for _, m := range have {
		m.mode = d.mode
	}

	for h := range wanted {
		if f, ok := failed[h]; ok {
			res.status[h] = f.status
		} else {
			res.status[h] = ua.StatusOK
		}
	}
	if !d.snapshot {
		return res
	}
	// The snapshot: the current value of every wanted item, in handle
	// order; a rejected item carries its rejection.
	res.snapshot = make([]snapValue, 0, len(d.items))
	var nodes []*ua.NodeID
	var idx []int
	for _, it := range d.items {
		if f, ok := failed[it.handle]; ok {
			dv := &ua.DataValue{Status: f.status, ServerTimestamp: time.Now()}
			dv.UpdateMask()
			res.snapshot = append(res.snapshot, snapValue{handle: it.handle, dv: dv})
			continue
		}
		idx = append(idx, len(res.snapshot))
		nodes = append(nodes, it.node)
		res.snapshot = append(res.snapshot, snapValue{handle: it.handle})
	}
	for start := 0; start < len(nodes); start += batch {
		end := min(start+batch, len(nodes))
		dvs, err := readValues(ctx, s.c, nodes[start:end])
		if err != nil {
			res.err = fmt.Errorf("read the snapshot: %w", err)
			return res
		}
		for i, dv := range dvs {
			if dv == nil {
				dv = &ua.DataValue{Status: ua.StatusBadNoData}
			}
			res.snapshot[idx[start+i]].dv = dv
		}
	}
	res.snapshotted = true
	return res
}

// write writes value to node on this session; the caller holds acquire.
func (s *session) write(ctx context.Context, node *ua.NodeID, value *ua.Variant) (ua.StatusCode, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	res, err := send[*ua.WriteResponse](ctx, s.c, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID:      node,
		AttributeID: ua.AttributeIDValue,
		Value:       &ua.DataValue{EncodingMask: ua.DataValueValue, Value: value},
	}}})
	if err != nil {
		if s.ctx.Err() != nil && ctx.Err() != nil {
			return ua.StatusBadNotConnected, fmt.Errorf("servicelevel: write on %s: the session ended", s.ep)
		}
		return ua.StatusBadCommunicationError, fmt.Errorf("servicelevel: write on %s: %w", s.ep, err)
	}
	if len(res.Results) != 1 {
		return ua.StatusBadUnexpectedError, fmt.Errorf("servicelevel: write on %s: %d results for 1 node", s.ep, len(res.Results))
	}
	code := res.Results[0]
	if code != ua.StatusOK {
		return code, fmt.Errorf("servicelevel: write on %s: %w", s.ep, code)
	}
	return code, nil
}

// stale reports whether a data change that follows a snapshot repeats or
// predates the snapshot's value f: the same sample again (the initial
// notification of an item created just before the snapshot read, or the
// queue a Hot promotion releases), or an older one.
func stale(dv, f *ua.DataValue) bool {
	if !dv.SourceTimestamp.IsZero() && !f.SourceTimestamp.IsZero() {
		if dv.SourceTimestamp.Before(f.SourceTimestamp) {
			return true
		}
		return dv.SourceTimestamp.Equal(f.SourceTimestamp) && dv.Status == f.Status
	}
	if dv.Status != f.Status {
		return false
	}
	if dv.Value == nil || f.Value == nil {
		return dv.Value == f.Value
	}
	return reflect.DeepEqual(dv.Value.Value(), f.Value.Value())
}
